"""What each slot's KV stream still holds after its request left, and which of it a new prompt may reuse. Which
slot a prompt takes and what it starts from, per cache mode: docs/cache-and-exactness.md, "Prefix cache"."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from worker.engine.kv import checkpoints
from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.host_cache import HostCache, SavedCells
from worker.engine.media import is_media
from worker.engine.modes import CacheMode
from worker.engine.positions import TOKENS, Positions
from worker.engine.requests import NO_ADAPTERS, AdapterSet

# Prefill chunk boundaries sit on multiples of this position. Without flash attention llama.cpp's CPU
# numerics do not depend on where a prompt is cut (bench/probes/kvrule.py), but repacked quantized
# weights (Q4_0, Q4_K... on x86) compute rows in groups from the chunk's start: cuts at multiples of 16
# keep every row in the same group whatever the load, and leave at most 15 cells to recompute.
ALIGN = 16
# Prefill a copy from another slot, or a load from host memory, must save: llama.cpp copies a slot's stream whole,
# which costs the prefill of a few tokens (bench/probes/copycost.py; docs/cache-and-exactness.md, "Prefix cache").
COPY_MIN_GAIN = 2 * ALIGN


def align_down(position: int, grid: int = ALIGN) -> int:
    return position - position % grid


def common_prefix(held_tokens: list[int], prompt: list[int]) -> int:
    return len(os.path.commonprefix([held_tokens, prompt]))


@dataclass(frozen=True)
class Reuse:
    slot: int  # the free slot the request runs in
    cells: int  # leading prompt tokens whose cells it starts with
    source: int | None = None  # another slot (running or free) whose stream is copied in first; None: its own
    saved: SavedCells | None = None  # cells in host memory loaded into the slot first (host_cache.py)


@dataclass
class SlotRecord:
    tokens: list[int] = field(default_factory=list)  # what the stream holds at positions 0..len-1
    exact: int = 0  # leading cells made by aligned prefill: the ones exact mode may reuse
    last_used: float = 0.0
    adapters: AdapterSet = NO_ADAPTERS  # what the cells were computed under
    # A recurrent state's checkpoints (checkpoints.py), oldest first: where a prompt may go on from, short of the end.
    checkpoints: list[Checkpoint] = field(default_factory=list)

    def shared(self, prompt: list[int], adapters: AdapterSet) -> int:
        """Leading tokens of `prompt` whose cells these are: none under another adapter set."""
        return common_prefix(self.tokens, prompt) if adapters == self.adapters else 0


def held(tokens: list[int], prefilled: int, adapters: AdapterSet = NO_ADAPTERS, grid: int = ALIGN) -> SlotRecord:
    """A stream holding `tokens` made under `adapters`, of which the first `prefilled` came from prefill chunks."""
    return SlotRecord(tokens, align_down(min(prefilled, len(tokens)), grid), adapters=adapters)


class PrefixCache:
    def __init__(self, mode: CacheMode, slots: int, host: HostCache | None = None, grid: int = ALIGN,
                 cuts_anywhere: bool = True) -> None:
        """Reusable cells, by `mode`: exact, only those made by prefill chunks on the grid, bitwise what a cold
        prefill makes (bench/probes/kvrule.py), or every matching one where the load-time check found decoded cells
        equal (startup/load_check.py); fast, every matching cell, as llama-server (greedy text may then differ from
        a cold run); off, none. `grid`: the positions prefill chunks start and end on, and exact mode's reuse stops
        at: ALIGN on the cpu backend, the micro-batch on a GPU (core/scheduler.py, chunk_grid). `cuts_anywhere`
        False: the slots keep a recurrent state (native/memory.py), which a prompt continues only from where it
        ends, so their cells are reused whole or not at all."""
        self.mode = mode
        self.cuts_anywhere = cuts_anywhere
        self.grid = grid
        self.every_cell = mode is CacheMode.FAST  # reuse every matching cell, answers' included
        self._records = [SlotRecord() for _ in range(slots)]
        self.host = host if mode is not CacheMode.OFF else None  # None: dropped cells are gone
        self.moves = True  # cells may be copied between slots or loaded back from host memory

    def distrust_moved_cells(self) -> None:
        """The numerics make cells copied to another slot or loaded back from host memory give other logits than
        where they were made (startup/load_check.py): exact then reuses a slot's own cells only."""
        if self.mode is CacheMode.EXACT:
            self.moves = False

    def trust_decoded_cells(self) -> None:
        """The numerics make answers' cells bitwise what prefill makes (startup/load_check.py): exact may reuse
        them all."""
        if self.mode is CacheMode.EXACT:
            self.every_cell = True

    def choose(self, prompt: list[int], free_slots: list[int], running: dict[int, SlotRecord],
               adapters: AdapterSet = NO_ADAPTERS, positions: Positions = TOKENS) -> Reuse:
        """The free slot to run `prompt` (under `adapters`) in and the cells it starts with: its own, or, where
        that saves COPY_MIN_GAIN tokens of prefill, another slot's (running or free) copied, or host memory's
        loaded, into the least recently used free slot. Only cells made under the same adapter set count.

        `running`: what each busy slot's stream holds now (its request's cells so far).
        """
        own = {slot: self.reusable(self._records[slot], prompt, adapters, positions) for slot in free_slots}
        slot = self._slot_in_place(prompt, adapters, free_slots, own)
        if not self.moves:
            return Reuse(slot, own[slot])
        sources = {source: self.reusable(record, prompt, adapters, positions) for source, record in running.items()}
        sources.update((source, cells) for source, cells in own.items() if source != slot)
        source = max(sources, key=sources.__getitem__, default=None)
        choice = Reuse(slot, own[slot])
        if source is not None and sources[source] - own[slot] >= COPY_MIN_GAIN:
            targets = [target for target in free_slots if target != source]
            choice = Reuse(self.least_recently_used(targets), sources[source], source)
        saved = {entry: self.reusable(self.record_of(entry), prompt, adapters, positions)
                 for entry in (self.host.entries if self.host else [])}
        best = max(saved, key=saved.__getitem__, default=None)
        if best is not None and saved[best] - choice.cells >= COPY_MIN_GAIN:
            return Reuse(self.least_recently_used(free_slots), saved[best], saved=best)
        return choice

    def _slot_in_place(self, prompt: list[int], adapters: AdapterSet, free_slots: list[int],
                       own: dict[int, int]) -> int:
        """The free slot holding the most of `prompt` (least recently used first among equals), among those
        whose other cells it may drop: cells a prompt does not share hold another conversation, asked for again
        at its next turn. An empty slot takes the prompt rather than drop any; with none, a slot is taken only
        by a prompt that keeps at least as many of its cells as it drops; failing both, the least recently
        used."""
        dropped = {slot: len(self._records[slot].tokens) - self._records[slot].shared(prompt, adapters)
                   for slot in free_slots}
        empty = any(not self._records[slot].tokens for slot in free_slots)
        in_place = [slot for slot in free_slots if dropped[slot] <= (0 if empty else own[slot])]
        if not in_place:
            return self.least_recently_used(free_slots)
        return max(in_place, key=lambda slot: (own[slot], -self._records[slot].last_used))

    def record(self, slot: int) -> SlotRecord:
        """What the slot's stream holds."""
        return self._records[slot]

    def least_recently_used(self, free_slots: list[int]) -> int:
        """The free slot whose cells are the least likely to be asked for again."""
        return min(free_slots, key=lambda slot: self._records[slot].last_used)

    def reusable(self, record: SlotRecord, prompt: list[int], adapters: AdapterSet = NO_ADAPTERS,
                 positions: Positions = TOKENS) -> int:
        """Leading tokens of `prompt` (placed at `positions`) whose cells the record's may be."""
        if self.mode is CacheMode.OFF or not record.tokens or record.adapters != adapters:
            return 0
        # At least the prompt's last two tokens are prefilled: the last one's logits start the answer, and a
        # one-row chunk would take llama.cpp's one-row kernels, which a cold prefill of the prompt does not.
        limit = len(prompt) - 2
        if not self.every_cell:
            limit = min(limit, record.exact)
        common = common_prefix(record.tokens[:limit], prompt[:limit])
        reused = common if self.every_cell else align_down(common, self.grid)
        while (whole := positions.whole(reused)) != reused:  # an M-RoPE image's cells go whole (positions.py)
            reused = whole if self.every_cell else align_down(whole, self.grid)
        if self.cuts_anywhere or reused == len(record.tokens):
            return reused
        # A recurrent state is where its last token left it: short of that, a prompt goes on from a checkpoint.
        return max((checkpoint.pos for checkpoint in record.checkpoints
                    if checkpoint.pos <= reused and positions.whole(checkpoint.pos) == checkpoint.pos), default=0)

    @staticmethod
    def record_of(saved: SavedCells) -> SlotRecord:
        """What saved cells hold, as a slot would record them."""
        return SlotRecord(saved.tokens, saved.exact, adapters=saved.adapters, checkpoints=saved.checkpoints)

    def checkpoint_positions(self, prompt_tokens: int, hints: tuple[int, ...] = ()) -> tuple[int, ...]:
        """Where a prompt of this many tokens has its recurrent state checkpointed while prefilled, so that a prompt
        sharing it can go on from there: near its end, and at `hints` (Prompts.with_checkpoints); none where
        cells cut anywhere or nothing is reused."""
        if self.cuts_anywhere or self.host is None:
            return ()
        # Exact mode reuses cells up to the grid only, unless it trusts every cell (as fast mode does).
        grid = 1 if self.every_cell else self.grid
        wanted = {align_down(hint, grid) for hint in hints} | {checkpoints.position(prompt_tokens, grid)}
        return tuple(sorted(pos for pos in wanted if 0 < pos < prompt_tokens))

    def checkpoint(self, holder: SlotRecord, cells: int) -> Checkpoint | None:
        """The checkpoint of a slot's recurrent state (as `holder` records it) that a prompt reusing its first
        `cells` goes on from; None: it goes on from where the state ends (or from nothing)."""
        if self.cuts_anywhere or cells == len(holder.tokens):
            return None
        return next((checkpoint for checkpoint in holder.checkpoints if checkpoint.pos == cells), None)

    def share_checkpoints(self, source: SlotRecord, slot: int, upto: int) -> None:
        """A slot given a copy of another's cells takes its checkpoints up to `upto` too (the same bytes)."""
        record = self._records[slot]
        record.checkpoints = source.checkpoints
        self._keep_checkpoints(record, upto)

    def add_checkpoint(self, slot: int, checkpoint: Checkpoint) -> bool:
        """Keep a checkpoint of a running request's slot, within --cache-ram (host memory makes room for it); False
        where none fits."""
        host = self.host
        if host is None or checkpoint.size > host.limit_bytes - self._checkpoint_bytes():
            return False
        record = self._records[slot]
        record.checkpoints = checkpoints.kept([*record.checkpoints, checkpoint], checkpoint.pos)
        host.reserve(self._checkpoint_bytes())
        return True

    def _keep_checkpoints(self, record: SlotRecord, upto: int) -> None:
        """Drop the record's checkpoints past position `upto` (its cells there are gone), and count what is left."""
        record.checkpoints = checkpoints.kept(record.checkpoints, upto)
        if self.host is not None:
            self.host.reserve(self._checkpoint_bytes())

    def _checkpoint_bytes(self) -> int:
        held = {id(checkpoint): checkpoint for record in self._records for checkpoint in record.checkpoints}
        return sum(checkpoint.size for checkpoint in held.values())

    def held(self, tokens: list[int], prefilled: int, adapters: AdapterSet = NO_ADAPTERS,
             kept: list[Checkpoint] | None = None) -> SlotRecord:
        """held() on this cache's grid, with the checkpoints `kept` of a recurrent state."""
        record = held(tokens, prefilled, adapters, self.grid)
        record.checkpoints = list(kept or [])
        return record

    def claim(self, slot: int, reuse: int = 0) -> None:
        """A request takes the slot, reusing its first `reuse` cells (the caller drops the others); forget what it
        held but the checkpoints of those cells, which the request keeps adding to."""
        record = self._records[slot]
        record.tokens = []  # held by the running request now; recorded again when it leaves
        record.exact = 0
        self._keep_checkpoints(record, reuse)

    def release(self, slot: int, tokens: list[int], prefilled: int, adapters: AdapterSet = NO_ADAPTERS) -> None:
        """A request left: its stream holds `tokens` made under `adapters`, of which the first `prefilled` came
        from prefill chunks."""
        record = self.held(tokens, prefilled, adapters)
        record.checkpoints = self._records[slot].checkpoints  # those the request made, and kept from before
        record.last_used = time.monotonic()
        self._records[slot] = record
        self._keep_checkpoints(record, len(tokens))

    def worth_saving(self, slot: int, kept: int) -> SlotRecord | None:
        """What of a slot's cells to save to host memory before a request keeping only its first `kept` takes
        it: the cells this mode may reuse, if that is COPY_MIN_GAIN more than kept and not saved already."""
        reusable = self.reusable_record(slot)
        if self.host is None or len(reusable.tokens) - kept < COPY_MIN_GAIN or self.host.holds(reusable.tokens,
                                                                                               reusable.adapters):
            return None
        return reusable

    def reusable_record(self, slot: int) -> SlotRecord:
        """What of the slot's cells this mode may reuse: its leading reusable_cells(slot) tokens."""
        record, reusable = self._records[slot], self.reusable_cells(slot)
        return SlotRecord(record.tokens[:reusable], min(record.exact, reusable), adapters=record.adapters,
                          checkpoints=checkpoints.kept(record.checkpoints, reusable))

    def reusable_cells(self, slot: int) -> int:
        """Leading cells of the slot this mode may reuse: cells_held(slot), or none where a recurrent state holds
        more (it goes whole or not at all)."""
        record, held_cells = self._records[slot], self.cells_held(slot)
        return 0 if not self.cuts_anywhere and held_cells < len(record.tokens) else held_cells

    def cells_held(self, slot: int) -> int:
        record = self._records[slot]
        return len(record.tokens) if self.every_cell else record.exact

    def tokens_held(self, slot: int) -> int:
        """Cells the slot's stream holds, reusable or not."""
        return len(self._records[slot].tokens)

    def unsettled(self, free_slots: list[int]) -> Settle | None:
        """Exact mode: the next grid block of a free slot's decode-made cells to prefill again, newest slot first
        (one block a step: a request that arrives meanwhile waits for the step).

        An answer's cells were made one token at a time, so exact mode cannot reuse them; prefilled again in
        aligned chunks while the engine has nothing better to do, they become what a cold prefill makes, and
        the conversation's next turn finds its whole history (but the last partial block) in the cache.
        """
        if self.mode is not CacheMode.EXACT or self.every_cell or not self.cuts_anywhere:
            # (a recurrent state cannot drop the answer's cells to prefill them again)
            return None
        for slot in sorted(free_slots, key=lambda s: -self._records[s].last_used):
            record = self._records[slot]
            target = align_down(len(record.tokens), self.grid)
            # An image's cells came from its embeddings, which are gone: they stay as they are, unsettled.
            if target > record.exact and not any(map(is_media, record.tokens[record.exact:target])):
                return Settle(slot, record.tokens[:target], record.exact, min(target, record.exact + self.grid),
                              record.adapters)
        return None

    def settled(self, settle: Settle) -> None:
        """The block was prefilled: cells up to settle.end are reusable (those past it are gone until settled)."""
        record = self._records[settle.slot]
        record.tokens = settle.tokens
        record.exact = settle.end

    def forget(self, slot: int) -> None:
        self._records[slot] = SlotRecord()
        if self.host is not None:
            self.host.reserve(self._checkpoint_bytes())


@dataclass(frozen=True)
class Settle:
    slot: int
    tokens: list[int]  # what the slot will hold once settled
    start: int  # cells from here on are dropped and prefilled again
    end: int
    adapters: AdapterSet = NO_ADAPTERS  # what the slot's cells were made under: prefilled again under the same
