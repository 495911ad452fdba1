"""--kv-dir's folder (engine/kv/disk_cache.py): what is written, renewed, removed, and loaded at start."""

from __future__ import annotations

import ctypes
import os
import time

from structlog.testing import capture_logs

from worker.engine.kv import cell_file
from worker.engine.kv.disk_cache import DiskCache
from worker.engine.kv.fingerprint import Fingerprint
from worker.engine.kv.host_cache import MIB, SavedCells

PRINT = Fingerprint.of({"model_sha256": "a" * 64, "cache_type_k": "q8_0"})
SYSTEM = list(range(1000, 1100))


def entry(tokens: list[int], mib: float = 1) -> SavedCells:
    return SavedCells(tokens, len(tokens) - len(tokens) % 16, (ctypes.c_uint8 * int(mib * MIB))())


def age(disk: DiskCache, saved: SavedCells, seconds_ago: float) -> None:
    when = time.time() - seconds_ago
    os.utime(disk.folder / disk.name(saved.tokens), (when, when))


def test_entries_load_back_newest_first_as_far_as_host_memory_holds(tmp_path):
    disk = DiskCache(tmp_path, 64 * MIB, PRINT)
    entries = [entry([*SYSTEM, n]) for n in range(4)]
    disk.write(entries)
    for n, saved in enumerate(entries):
        age(disk, saved, 100 - n)  # entries[3] the newest
    loaded = DiskCache(tmp_path, 64 * MIB, PRINT).load(budget_bytes=int(2.5 * MIB))
    assert [saved.tokens for saved in loaded] == [entries[2].tokens, entries[3].tokens]  # oldest first, for the host
    assert len(list(tmp_path.glob("*.kv"))) == 4  # what did not fit stays on disk


def test_a_file_is_written_once_then_renewed_and_a_longer_turn_replaces_it(tmp_path):
    disk = DiskCache(tmp_path, 64 * MIB, PRINT)
    turn = entry([*SYSTEM, 1, 2])
    disk.write([turn])
    path = tmp_path / disk.name(turn.tokens)
    age(disk, turn, 1000)
    inode = path.stat().st_ino
    disk.write([turn])  # the same cells again: renewed, not rewritten
    assert path.stat().st_ino == inode and time.time() - path.stat().st_mtime < 100
    assert disk.known(turn.tokens, turn.exact)
    later = entry([*SYSTEM, 1, 2, 3, 4])
    disk.write([], still_held=[turn.tokens])  # a slot holds it and a file has it: renewed too
    disk.write([later])
    assert [p.name for p in tmp_path.glob("*.kv")] == [disk.name(later.tokens)]
    assert disk.stats.written_entries == 2


def test_past_the_bound_the_oldest_files_go_first_whoever_wrote_them(tmp_path):
    other = DiskCache(tmp_path, 64 * MIB, Fingerprint.of({"model_sha256": "b" * 64}))
    foreign = entry([*SYSTEM, 9])
    other.write([foreign])
    age(other, foreign, 1000)
    disk = DiskCache(tmp_path, int(3.5 * MIB), PRINT)
    entries = [entry([*SYSTEM, n]) for n in range(3)]
    disk.write(entries[:2])
    disk.write(entries[2:])  # 4 files of ~1 MiB past a 3.5 MiB bound: the other worker's, the oldest, goes
    assert sorted(p.name for p in tmp_path.glob("*.kv")) == sorted(disk.name(e.tokens) for e in entries)
    assert disk.stats.bytes_held <= 3.5 * MIB


def test_what_must_not_load_is_skipped_with_one_warning_each(tmp_path):
    disk = DiskCache(tmp_path, 64 * MIB, PRINT)
    good, cut, foreign = entry([*SYSTEM, 1]), entry([*SYSTEM, 2]), entry([*SYSTEM, 3])
    disk.write([good, cut])
    truncated = tmp_path / disk.name(cut.tokens)
    truncated.write_bytes(truncated.read_bytes()[:-100])
    elsewhere = tmp_path / "0123456789abcdef0123456789abcdef.kv"
    cell_file.write(elsewhere, Fingerprint.of({**PRINT.as_dict(), "cache_type_k": "f16"}), foreign)
    with capture_logs() as logs:
        loaded = DiskCache(tmp_path, 64 * MIB, PRINT).load(64 * MIB)
    assert [saved.tokens for saved in loaded] == [good.tokens]
    skipped = {entry["file"]: entry for entry in logs if entry["event"] == "kv_entry_skipped"}
    assert skipped.keys() == {str(truncated), str(elsewhere)}
    assert skipped[str(truncated)]["reason"].startswith("truncated") and skipped[str(truncated)]["removed"]
    assert skipped[str(elsewhere)]["reason"] == "fingerprint differs: cache_type_k f16 here q8_0"
    assert not truncated.exists() and elsewhere.exists()  # never loadable: gone; another worker's: left
    [done] = [entry for entry in logs if entry["event"] == "kv_dir_loaded"]
    assert (done["entries"], done["skipped"]) == (1, 2)


def test_at_start_an_entry_a_later_turn_holds_is_removed(tmp_path):
    disk = DiskCache(tmp_path, 64 * MIB, PRINT)
    short, long = entry([*SYSTEM, 1]), entry([*SYSTEM, 1, 2, 3])
    disk.write([long])
    cell_file.write(tmp_path / disk.name(short.tokens), PRINT, short)  # as a worker that had not seen `long` would
    loaded = DiskCache(tmp_path, 64 * MIB, PRINT).load(64 * MIB)
    assert [saved.tokens for saved in loaded] == [long.tokens]
    assert [p.name for p in tmp_path.glob("*.kv")] == [disk.name(long.tokens)]
