"""Cells that outlive a slot's request on disk: --kv-dir (what the replacement worker starts with) and the slot
files of POST /slots/{id}?action=save|restore|erase. Each moves cells on the engine thread once their slot is free
(kv/cell_transfer.py); a file loads only into a worker of the same fingerprint (kv/fingerprint.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import structlog

from worker.engine.engine import Engine
from worker.engine.errors import AdapterCells, UnrestorableFile
from worker.engine.kv import cell_file
from worker.engine.kv.disk_cache import DiskCache, DiskStats
from worker.engine.kv.fingerprint import Fingerprint, engine_fingerprint
from worker.engine.kv.held_cells import DISK, HeldCells

log = structlog.get_logger(__name__)

MOVED_CELLS_INEXACT = ("cells loaded from host memory or copied from another slot gave other logits than where "
                       "they were made in the load-time check")


@dataclass(frozen=True)
class SlotFile:
    """A slot's cells written to a file or read from one (POST /slots/{id}?action=save|restore)."""

    tokens: int
    bytes: int
    ms: float


class SavedCells:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._disk: DiskCache | None = None  # --kv-dir
        self._on_disk: dict[str, HeldCells] = {}  # on_disk()'s last answer, by file name

    @property
    def disk(self) -> DiskStats | None:
        """What --kv-dir holds and what was restored from it; None without --kv-dir."""
        return self._disk.stats if self._disk is not None else None

    def on_disk(self) -> list[HeldCells]:
        """The reusable cells --kv-dir's files hold, as this mode reuses them (KV events); none without --kv-dir. A
        file seen before keeps its HeldCells object (kv/blocks.py then does nothing for it)."""
        if self._disk is None:
            return []
        every_cell = self._engine.cache.every_cell
        held: dict[str, HeldCells] = {}
        for name, (tokens, exact) in self._disk.files().items():
            before = self._on_disk.get(name)
            reusable = len(tokens) if every_cell else exact
            if reusable:  # files hold base-model cells only (persist)
                held[name] = before if before is not None and len(before.tokens) == reusable else HeldCells(
                    DISK, tokens[:reusable])
        self._on_disk = held
        return list(held.values())

    def open_kv_dir(self, folder: Path, limit_bytes: int) -> None:
        """Put the cells a worker of this fingerprint left in `folder` into host memory, before serving."""
        cache = self._engine.cache
        host = cache.host
        if host is None:  # settings refuse --kv-dir without --cache-ram: nothing could hold the cells
            raise ValueError("--kv-dir needs host memory for cells (--cache-ram)")
        self._disk = DiskCache(folder, limit_bytes, self.fingerprint)
        if not cache.moves:  # its cells could only be loaded back, which this numerics forbids
            log.warning("kv_dir_not_read", folder=str(folder), reason=MOVED_CELLS_INEXACT)
            return
        for saved in self._disk.load(host.limit_bytes):
            host.add(saved)

    @cached_property
    def fingerprint(self) -> Fingerprint:
        """What this worker's cells' numerics depend on: saved cells load only under the same (kv/fingerprint.py)."""
        return engine_fingerprint(self._engine.model)

    async def persist(self) -> None:
        """Write what the free slots and host memory hold that this mode reuses to --kv-dir (kv/disk_cache.py);
        nothing without --kv-dir."""
        disk = self._disk
        if disk is None:
            return
        new, still_held = await asyncio.wrap_future(self._engine.steps.free_slots_cells(disk.known))
        host_cache = self._engine.cache.host
        entries = host_cache.entries if host_cache else []
        # Cells belong to the adapter set they were made under (kv/prefix_cache.py), and a file's fingerprint
        # names none: only cells made without adapters go to disk (a loaded file's cells serve requests without
        # adapters); those made under adapters stay in host memory only (CellTransfer.snapshots skips slots' too).
        host = [entry for entry in entries if not entry.adapters]
        if len(host) < len(entries):
            log.debug("kv_dir_cells_skipped", entries=len(entries) - len(host), reason="made under LoRA adapters")
        host = [text for entry in host if (text := entry.leading_text()).tokens]  # (an image first: nothing)
        await asyncio.to_thread(disk.write, [*host, *new], still_held)

    async def save_slot(self, slot: int, path: Path) -> SlotFile:
        """Write a slot's reusable cells to `path`, once the slot is free (waiting for its request to leave)."""
        started = time.perf_counter()
        saved = await asyncio.wrap_future(self._engine.on_slot(slot, lambda cells: cells.snapshot(slot)))
        if saved is None:
            raise MemoryError(f"no host memory for slot {slot}'s cells")
        if saved.adapters:  # a file holds base-model cells only, as --kv-dir's do (persist)
            raise AdapterCells(slot, str(saved.adapters))
        written = await asyncio.to_thread(cell_file.write, path, await self._fingerprinted(), saved)
        return SlotFile(len(saved.tokens), written, (time.perf_counter() - started) * 1e3)

    async def restore_slot(self, slot: int, path: Path) -> SlotFile:
        """Load the cells a file holds into a slot, once it is free; raises UnrestorableFile for a file that is not
        there or must not load, naming why."""
        started = time.perf_counter()
        if not self._engine.cache.moves:
            raise UnrestorableFile(path.name, f"{MOVED_CELLS_INEXACT}; exact mode restores no cells here "
                                              "(fast mode does)")
        try:
            saved = await asyncio.to_thread(cell_file.read, path, await self._fingerprinted())
        except FileNotFoundError:
            raise UnrestorableFile(path.name, "no such file") from None
        except cell_file.UnusableFile as exc:
            raise UnrestorableFile(path.name, str(exc)) from None
        if not await asyncio.wrap_future(self._engine.on_slot(slot, lambda cells: cells.load(slot, saved))):
            raise UnrestorableFile(path.name, "llama.cpp refused its cells")
        read = (await asyncio.to_thread(path.stat)).st_size
        return SlotFile(len(saved.tokens), read, (time.perf_counter() - started) * 1e3)

    async def erase_slot(self, slot: int) -> int:
        """Empty a slot once it is free: the cells it held."""
        return await asyncio.wrap_future(self._engine.on_slot(slot, lambda cells: cells.erase(slot)))

    async def _fingerprinted(self) -> Fingerprint:
        """The fingerprint, worked out off the event loop the first time (it hashes the model file)."""
        return await asyncio.to_thread(lambda: self.fingerprint)
