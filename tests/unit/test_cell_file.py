"""Cell files (engine/kv/cell_file.py): what is written reads back whole, and nothing else reads back at all."""

from __future__ import annotations

import ctypes
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from worker.engine.kv import cell_file
from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.disk_cache import DiskCache
from worker.engine.kv.fingerprint import Fingerprint
from worker.engine.kv.host_cache import SavedCells

PRINT = Fingerprint.of({"model_sha256": "a" * 64, "libraries_sha256": "b" * 64, "cache_type_k": "q8_0",
                        "flash_attn": "on", "prefix_cache": "exact"})


def cells(tokens: int = 40, data: int = 4096, seed: int = 0) -> SavedCells:
    draw = random.Random(seed)
    raw = bytes(draw.randrange(256) for _ in range(data))
    return SavedCells([draw.randrange(49152) for _ in range(tokens)], tokens - tokens % 16,
                      (ctypes.c_uint8 * data).from_buffer_copy(raw))


def test_a_written_file_reads_back_as_the_same_cells(tmp_path):
    saved = cells()
    size = cell_file.write(tmp_path / "one.kv", PRINT, saved)
    assert size == (tmp_path / "one.kv").stat().st_size
    back = cell_file.read(tmp_path / "one.kv", PRINT)
    assert (back.tokens, back.exact, bytes(back.data)) == (saved.tokens, saved.exact, bytes(saved.data))
    assert cell_file.read_head(tmp_path / "one.kv", PRINT).tokens == saved.tokens
    assert [p.name for p in tmp_path.iterdir()] == ["one.kv"]  # the temp file was renamed, nothing left beside it


def test_a_recurrent_states_checkpoints_read_back_with_its_cells(tmp_path):
    saved = cells()
    saved.checkpoints = [Checkpoint(16, cells(data=300, seed=1).data), Checkpoint(32, cells(data=200, seed=2).data)]
    size = cell_file.write(tmp_path / "one.kv", PRINT, saved)
    assert cell_file.read_head(tmp_path / "one.kv", PRINT).file_bytes == size
    back = cell_file.read(tmp_path / "one.kv", PRINT)
    assert [(c.pos, bytes(c.data)) for c in back.checkpoints] == [(c.pos, bytes(c.data)) for c in saved.checkpoints]
    assert bytes(back.data) == bytes(saved.data)


def test_a_file_truncated_anywhere_never_loads(tmp_path):
    whole = tmp_path / "whole.kv"
    cell_file.write(whole, PRINT, cells())
    raw = whole.read_bytes()
    cut = tmp_path / "cut.kv"
    for point in [0, 5, 12, 40, *random.Random(1).sample(range(len(raw)), 40), len(raw) - 1]:
        cut.write_bytes(raw[:point])
        with pytest.raises(cell_file.UnusableFile, match="truncated"):
            cell_file.read(cut, PRINT)


def test_a_changed_byte_fails_the_checksum(tmp_path):
    path = tmp_path / "one.kv"
    cell_file.write(path, PRINT, cells())
    raw = bytearray(path.read_bytes())
    head = cell_file.read_head(path, PRINT).head_bytes
    for offset in (head - 3, head + 100, len(raw) - 40, len(raw) - 1):  # a token, the cells, the checksum
        changed = bytearray(raw)
        changed[offset] ^= 0x01
        path.write_bytes(changed)
        with pytest.raises(cell_file.UnusableFile, match="checksum differs"):
            cell_file.read(path, PRINT)


def test_another_fingerprint_is_refused_naming_each_part_that_differs(tmp_path):
    path = tmp_path / "one.kv"
    cell_file.write(path, PRINT, cells())
    other = Fingerprint.of({**PRINT.as_dict(), "model_sha256": "c" * 64, "cache_type_k": "f16"})
    with pytest.raises(cell_file.OtherFingerprint) as refused:
        cell_file.read(path, other)
    assert str(refused.value) == ("fingerprint differs: cache_type_k q8_0 here f16; "
                                  f"model_sha256 {'a' * 16}… here {'c' * 16}…")
    with pytest.raises(cell_file.UnusableFile, match="not a cell file"):
        (tmp_path / "text.kv").write_text("not cells at all")
        cell_file.read(tmp_path / "text.kv", PRINT)


KILLED_WRITER = """
import ctypes, os, sys, time
from pathlib import Path
from worker.engine.kv.disk_cache import DiskCache
from worker.engine.kv.fingerprint import Fingerprint
from worker.engine.kv.host_cache import SavedCells

def stall(fd):  # every byte is in the temp file; the rename would come next
    print("written", flush=True)
    time.sleep(60)

os.fsync = stall
disk = DiskCache(Path(sys.argv[1]), 1 << 30, Fingerprint.of({"model_sha256": "a" * 64}))
disk.write([SavedCells(list(range(64)), 64, (ctypes.c_uint8 * (8 << 20))())])
"""


def test_a_writer_killed_mid_write_leaves_no_file_that_loads(tmp_path):
    """kill -9 between the last byte and the rename (os.fsync stalled in the writer): only the temp file is left,
    it never loads, and a later start removes it once it is old enough to be no live writer's."""
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    assert writer.stdout is not None and writer.stdout.readline() == "written\n"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    [part] = list(tmp_path.iterdir())
    assert part.name.startswith(".") and part.name.endswith(".part") and part.stat().st_size > 8 << 20
    disk = DiskCache(tmp_path, 1 << 30, Fingerprint.of({"model_sha256": "a" * 64}))
    assert disk.load(1 << 30) == [] and part.exists()  # young: maybe a draining worker's write
    old = time.time() - 3600
    os.utime(part, (old, old))
    assert disk.load(1 << 30) == [] and list(tmp_path.iterdir()) == []
