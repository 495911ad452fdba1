"""--kv-dir: the slots' and host memory's reusable cells on disk, one cell file an entry (cell_file.py), so that the
worker that replaces this one starts warm; a worker loads only files of its own fingerprint (docs/operations.md,
"Warm restarts (`--kv-dir`)")."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from worker.engine.kv import cell_file
from worker.engine.kv.fingerprint import Fingerprint
from worker.engine.kv.host_cache import SavedCells

log = structlog.get_logger(__name__)

SUFFIX = ".kv"
# A temp file (atomic_file's `.NAME.*.part`) older than this is a writer's that was killed: a write takes well under
# a second here (~0.2 s for 200 MB); a younger one may be a draining worker's, still writing into a shared folder.
STALE_PART_S = 600.0


@dataclass(frozen=True)
class DiskStats:
    restored_entries: int = 0  # read into host memory at start
    restored_tokens: int = 0
    skipped_entries: int = 0  # at start: truncated, corrupt, or of another fingerprint
    written_entries: int = 0  # since start
    bytes_held: int = 0  # cell files in the folder, as last counted


@dataclass(frozen=True)
class _Known:
    """A cell file of this fingerprint in the folder."""

    tokens: list[int]
    exact: int


def _begins(short: list[int], long: list[int]) -> bool:
    return len(short) < len(long) and long[:len(short)] == short


class DiskCache:
    def __init__(self, folder: Path, limit_bytes: int, fingerprint: Fingerprint) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.limit_bytes = limit_bytes
        self.fingerprint = fingerprint
        self.stats = DiskStats()  # replaced whole: /metrics reads it from another thread
        # File name -> what it holds. Read by the engine thread (known()) while a writer thread updates it: single
        # dict operations, atomic under the GIL.
        self._known: dict[str, _Known] = {}
        self._writing = threading.Lock()  # one write at a time (the interval's and the drain's may overlap)

    def name(self, tokens: list[int]) -> str:
        digest = hashlib.sha256(self.fingerprint.digest.encode())
        digest.update(array("i", tokens).tobytes())
        return digest.hexdigest()[:32] + SUFFIX

    def known(self, tokens: list[int], exact: int) -> bool:
        """Whether a file holds these cells already, as reusable (write() then only renews it)."""
        known = self._known.get(self.name(tokens))
        return known is not None and known.exact >= exact

    def files(self) -> dict[str, tuple[list[int], int]]:
        """Each cell file of this fingerprint in the folder, by name: the tokens it holds and how many of them exact
        mode reuses. Read from any thread: one copy of the dict, atomic under the GIL."""
        return {name: (known.tokens, known.exact) for name, known in list(self._known.items())}

    def load(self, budget_bytes: int) -> list[SavedCells]:
        """The entries of this fingerprint to put in host memory, oldest first: the newest that fit `budget_bytes`
        (the host cache's bound). Skips, with a warning each, what must not load: a truncated or corrupt file is
        removed (it can never load), one of another fingerprint left (another worker may own it) until the bound
        removes it. A later prompt that continues an entry loads it into a slot as any host-memory entry."""
        started = time.perf_counter()
        self._remove_stale_parts()
        heads: dict[Path, cell_file.Head] = {}
        skipped = 0
        for path in self._newest_first():
            try:
                heads[path] = cell_file.read_head(path, self.fingerprint)
            except cell_file.UnusableFile as exc:
                skipped += 1
                self._skip(path, exc)
            except OSError:  # removed meanwhile (a worker sharing the folder)
                continue
        for path, head in list(heads.items()):
            if any(_begins(head.tokens, other.tokens) and head.exact <= other.exact for other in heads.values()):
                path.unlink(missing_ok=True)  # a later turn of the same conversation holds all of it
                del heads[path]
        entries, held = [], 0
        for path, head in heads.items():
            self._known[path.name] = _Known(head.tokens, head.exact)
            if held + head.file_bytes > budget_bytes:
                continue
            try:
                saved = cell_file.read(path, self.fingerprint)
            except cell_file.UnusableFile as exc:
                skipped += 1
                self._skip(path, exc)
                continue
            except OSError:
                continue
            entries.append(saved)
            held += head.file_bytes
        self.stats = replace(self.stats, restored_entries=len(entries), skipped_entries=skipped,
                             restored_tokens=sum(len(saved.tokens) for saved in entries),
                             bytes_held=sum(map(self._size, self._newest_first())))
        log.info("kv_dir_loaded", folder=str(self.folder), entries=len(entries),
                 tokens=self.stats.restored_tokens, bytes=held, skipped=skipped,
                 seconds=round(time.perf_counter() - started, 3))
        return entries[::-1]

    def write(self, entries: Iterable[SavedCells], still_held: Iterable[list[int]] = ()) -> None:
        """Write the entries no file holds yet; renew the files of the others and of `still_held` (tokens whose
        cells a slot holds and a file has); then remove the oldest files past the bound (--kv-dir-size). The engine
        calls it every --kv-dir-interval seconds and on drain, with what its free slots and host cache hold that its
        mode may reuse; a file whose tokens begin a new entry's is removed for it."""
        started = time.perf_counter()
        with self._writing:
            written = renewed = 0
            for saved in entries:
                if self.known(saved.tokens, saved.exact) and self._renew(saved.tokens):
                    renewed += 1
                    continue
                name = self.name(saved.tokens)
                cell_file.write(self.folder / name, self.fingerprint, saved)
                self._known[name] = _Known(saved.tokens, saved.exact)
                self._remove_begun_by(saved)
                written += 1
            renewed += sum(self._renew(tokens) for tokens in still_held)
            removed, held = self._hold_to_bound()
            self.stats = replace(self.stats, written_entries=self.stats.written_entries + written, bytes_held=held)
        # Every interval renews what is still held; a line only when something changed.
        (log.info if written or removed else log.debug)(
            "kv_dir_written", folder=str(self.folder), written=written, renewed=renewed, removed=removed, bytes=held,
            seconds=round(time.perf_counter() - started, 3))

    def _renew(self, tokens: list[int]) -> bool:
        """Set the file's time to now (it stays among the newest); False if it is gone."""
        name = self.name(tokens)
        try:
            os.utime(self.folder / name)
        except FileNotFoundError:
            self._known.pop(name, None)
            return False
        return True

    def _remove_begun_by(self, saved: SavedCells) -> None:
        """Files whose tokens begin the new entry's: it holds all they do."""
        for name, known in list(self._known.items()):
            if _begins(known.tokens, saved.tokens) and known.exact <= saved.exact:
                (self.folder / name).unlink(missing_ok=True)
                self._known.pop(name, None)

    def _hold_to_bound(self) -> tuple[int, int]:
        """Remove the oldest cell files, this fingerprint's or not, until the rest fit the bound: how many went,
        and the bytes left."""
        files = [(path, self._size(path)) for path in self._newest_first()]
        held, removed = sum(size for _, size in files), 0
        while files and held > self.limit_bytes:
            oldest, size = files.pop()
            oldest.unlink(missing_ok=True)
            self._known.pop(oldest.name, None)
            held -= size
            removed += 1
        return removed, held

    def _newest_first(self) -> list[Path]:
        dated = []
        for path in self.folder.glob("*" + SUFFIX):
            try:
                dated.append((path.stat().st_mtime, path))
            except FileNotFoundError:
                continue
        return [path for _, path in sorted(dated, reverse=True)]

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0

    def _remove_stale_parts(self) -> None:
        now = time.time()
        for part in self.folder.glob(".*" + SUFFIX + ".*.part"):
            try:
                if now - part.stat().st_mtime > STALE_PART_S:
                    part.unlink()
            except FileNotFoundError:
                continue

    def _skip(self, path: Path, why: cell_file.UnusableFile) -> None:
        """One warning line naming the file and why it did not load; a file that can never load is removed."""
        foreign = isinstance(why, cell_file.OtherFingerprint)
        if not foreign:
            path.unlink(missing_ok=True)
        log.warning("kv_entry_skipped", file=str(path), reason=str(why), removed=not foreign)
