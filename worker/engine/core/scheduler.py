"""Who runs, in which slot, on which cached prefix, and what each step computes. It decides; it runs nothing.
Exactness is decided here, by how prompts are cut into llama_decode calls (docs/cache-and-exactness.md,
"Prefix cache")."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from worker.engine.config import EngineConfig
from worker.engine.core.adapter_turns import Turns
from worker.engine.core.slot_placement import MOVE_MAX_CELLS, beside_own_set
from worker.engine.kv.disk_cache import DiskStats
from worker.engine.kv.host_cache import SavedCells
from worker.engine.kv.prefix_cache import ALIGN, COPY_MIN_GAIN, PrefixCache, Reuse, Settle, align_down
from worker.engine.media import MediaSpan
from worker.engine.modes import CacheMode
from worker.engine.requests import NO_ADAPTERS, AdapterSet
from worker.engine.sequence import Sequence, SequenceState

# A step with prefill may take this many decode steps' time on top of its decode rows (vLLM's token budget per step
# has the same aim): every running stream waits for a step's prefill, so a long new prompt no longer stops them for
# most of a second, at the cost of its own first token. 3 keeps the longest gap between two tokens within 4x the
# median (docs/cache-and-exactness.md, "Prefill beside running streams").
STALL_FACTOR = 3.0
# Weight of the newest step in the running averages of the pace.
PACE_SMOOTHING = 0.2


@dataclass(frozen=True)
class SchedulerStats:
    running: int
    waiting: int
    slots: int
    kv_cells_used: int  # held by running requests
    kv_cells_total: int
    kv_cells_cached: int = 0  # kept in free slots for the prefix cache; given up as slots are needed
    cache_ram_bytes: int = 0  # host memory holding cells pushed out of slots (host_cache.py)
    cache_ram_limit_bytes: int = 0  # its bound (--cache-ram)
    disk: DiskStats | None = None  # --kv-dir's counters (disk_cache.py); None: no --kv-dir
    # Cumulative, for "where does a step's time go": llama_decode vs everything else on the thread.
    steps: int = 0
    step_s: float = 0.0
    decode_s: float = 0.0
    adapter_switches: int = 0  # times the context changed its LoRA adapter set (native/adapters.py)
    untimed_pass_rows: tuple[int, ...] = ()  # draft passes startup did not time (busy cores), timed once idle
    # The LoRA adapters (ids, --lora order) the running and the waiting requests run under: what a cluster router
    # reads to send a request where its adapter is already in use (api/metrics.py, vllm:lora_requests_info).
    running_adapters: tuple[int, ...] = ()
    waiting_adapters: tuple[int, ...] = ()


@dataclass
class Pace:
    """How long a step's decode rows take and how long one prefilled token takes, as the runner measures them."""

    decode_step_s: float = 0.0
    prefill_token_s: float = 0.0
    switch_s: float = 0.0  # what changing the context's LoRA adapters adds to the call after it (adapter_turns.py)
    # A decode call's time by its rows: what the call after a switch is measured against. The average over all
    # steps will not do: under two adapter sets a call holds half the rows of the steps before it, so the
    # switch's cost would read as nothing and the sets would switch every step.
    decode_call_s: dict[int, float] = field(default_factory=dict)

    def observe_decode(self, seconds: float, rows: int) -> None:
        self.decode_step_s = _smooth(self.decode_step_s, seconds)
        self.decode_call_s[rows] = _smooth(self.decode_call_s.get(rows, 0.0), seconds)

    def observe_switch(self, seconds: float) -> None:
        self.switch_s = _smooth(self.switch_s, max(0.0, seconds))

    def observe_prefill(self, seconds: float, tokens: int) -> None:
        self.prefill_token_s = _smooth(self.prefill_token_s, seconds / tokens)

    def prefill_tokens_beside_streams(self, budget: int, grid: int = ALIGN) -> int:
        """Prefill tokens a step may hold while streams decode: STALL_FACTOR decode steps' worth, whole blocks.

        Until both speeds are measured, the least a step holds: the first step of a stream beside new prompts has no
        decode step to measure against, and the whole budget there held the streams for most of a second
        (bench/probes/RESULTS.md, "Eight clients"); the step after it is measured."""
        # At least two blocks: a prompt whose last block is one row over is cut a block early (see plan()).
        least = min(budget, 2 * grid)
        if not self.decode_step_s or not self.prefill_token_s:
            return least
        fits = int(STALL_FACTOR * self.decode_step_s / self.prefill_token_s)
        return min(budget, max(least, align_down(fits, grid)))


def _smooth(average: float, sample: float) -> float:
    return sample if not average else average + PACE_SMOOTHING * (sample - average)


@dataclass(frozen=True)
class Chunk:
    sequence: Sequence
    start: int
    end: int

    @property
    def completes_prompt(self) -> bool:
        return self.end == len(self.sequence.prompt)


@dataclass(frozen=True)
class StepPlan:
    decode: list[Sequence]  # one row each, in one llama_decode call
    prefill: list[Chunk]  # one llama_decode call each
    settle: Settle | None = None  # a free slot's block to prefill again, when nothing else needs the time
    adapters: AdapterSet = NO_ADAPTERS  # the LoRA adapters the decode rows and chunks run under


@dataclass(frozen=True)
class Admission:
    sequence: Sequence
    slot: int
    reuse: int  # leading prompt tokens whose cells the slot holds once `source` is copied in
    source: int | None = None  # another slot (running or free) whose stream is copied into this one first
    saved: SavedCells | None = None  # cells in host memory loaded into this slot first (host_cache.py)


def chunk_budget(config: EngineConfig) -> int:
    """Prefill tokens per step. On the CPU alone: whole ALIGN blocks that fit one micro-batch, so that llama.cpp does
    not cut a chunk again. On a GPU: whole micro-batches that fit the batch, which llama.cpp runs back to back in one
    call, cut at multiples of the micro-batch from the chunk's start (on chunk_grid's grid, where a cold prefill cuts
    too); one call a micro-batch would leave the GPU idle while the next call's graph is built."""
    if config.on_cpu_alone:
        return max(ALIGN, align_down(config.micro_batch))
    return config.batch_size - config.batch_size % config.micro_batch


def chunk_grid(config: EngineConfig) -> int:
    """The positions exact and off modes cut prompts on, and exact mode's reuse stops at.

    On the CPU alone the kernels (patched, or pinned: exactness/build_choice.py) compute a row the same in any
    chunk that starts on a multiple of ALIGN (repacked weights group rows from the chunk's start). A GPU library
    picks its kernels by the rows of a call: on an H100, ggml-cuda gave other logits for every other cut of a prompt,
    with flash attention off and on (bench/probes/RESULTS.md, "CUDA"). There only a chunk cut the same way makes the
    same cells, so prompts are cut on multiples of the micro-batch, counted from position 0 (llama.cpp cuts a
    chunk into micro-batches from its start), and exact mode reuses whole micro-batches: a prompt then computes as
    its cold prefill does, whatever was cached. Fast mode cuts on ALIGN anywhere (it does not promise that).
    """
    if config.prefix_cache is CacheMode.FAST or config.on_cpu_alone:
        return ALIGN
    return config.micro_batch


def _outside_whole_media(media: tuple[MediaSpan, ...], start: int, end: int) -> int:
    """A chunk start..end's end moved out of an image decoded whole (MediaSpan.whole): back to the image's start,
    or, for a chunk that starts at or inside it, on to its end (the chunk then takes more than the step's budget)."""
    for span in media:
        if span.whole and span.start < end < span.end:
            return span.start if span.start > start else span.end
    return end


class Scheduler:
    def __init__(self, cache: PrefixCache, budget: int, pace: Pace | None = None) -> None:
        self.cache = cache
        self.budget = budget
        self.pace = pace or Pace()
        self.turns = Turns()

    def admit(self, waiting: deque[Sequence], free_slots: list[int], running: list[Sequence]) -> list[Admission]:
        """First come, first served; each to the free slot holding the most of its prompt, or given a copy
        of another slot's cells when that holds more (prefix_cache.py).

        A request with forks (n > 1) waits until it and every fork have a slot, and holds back those
        behind it: the forks receive a copy of its prompt's cells, so they must be ready when its
        prompt is. A request whose prompt a running one is still prefilling waits for those cells,
        to copy them, and lets the ones behind it go first.
        """
        admitted: list[Admission] = []
        if not waiting or not free_slots:  # most steps admit nobody
            return admitted
        # Cells up to n_past are complete between steps; prompt cells came from prefill chunks.
        streams = {seq.slot: self.cache.held(seq.tokens_in_kv(), min(seq.n_past, len(seq.prompt)),
                                             seq.request.adapters, self.cache.record(seq.slot).checkpoints)
                   for seq in running}
        prefilling = [seq for seq in running if seq.state is SequenceState.PREFILLING]
        sets = {seq.slot: seq.request.adapters for seq in running}  # and of those admitted so far
        for sequence in list(waiting):
            if len(free_slots) <= len(sequence.forks):
                break
            if sequence.request.prompt_logprobs is not None:  # every prompt row's logits: nothing cached will do
                choice = Reuse(self.cache.least_recently_used(free_slots), 0)
            else:
                choice = self.cache.choose(sequence.prompt, free_slots, streams, sequence.request.adapters,
                                           sequence.positions)
                if self._prefilling_more(sequence, prefilling, choice.cells):
                    continue
                choice = self._placed(choice, sequence, free_slots, sets)
            waiting.remove(sequence)
            free_slots.remove(choice.slot)
            if choice.saved is not None:  # this request's now: no other may load it too
                host = self.cache.host
                assert host is not None  # saved cells come from the host cache
                host.take(choice.saved)
            admitted.append(Admission(sequence, choice.slot, choice.cells, choice.source, choice.saved))
            sets[choice.slot] = sequence.request.adapters
            prefilling.append(sequence)  # from this step on: a burst's later requests wait for its cells
            for fork in sequence.forks:
                slot = self.cache.least_recently_used(free_slots)
                free_slots.remove(slot)
                admitted.append(Admission(fork, slot, 0))
        return admitted

    def _placed(self, choice: Reuse, sequence: Sequence, free_slots: list[int], sets: dict[int, AdapterSet]) -> Reuse:
        """The choice, or, beside requests under other LoRA adapter sets, a slot next to its own set's when the
        choice reuses little of its own slot's cells (slot_placement.py)."""
        adapters = sequence.request.adapters
        if (choice.source is not None or choice.saved is not None or choice.cells > MOVE_MAX_CELLS
                or all(other == adapters for other in sets.values())):
            return choice
        slot = beside_own_set(free_slots, sets, adapters)
        if slot == choice.slot:
            return choice
        return Reuse(slot, self.cache.reusable(self.cache.record(slot), sequence.prompt, adapters, sequence.positions))

    def _prefilling_more(self, sequence: Sequence, prefilling: list[Sequence], reuse: int) -> bool:
        """Whether a request still prefilling will hold COPY_MIN_GAIN more of the sequence's prompt than `reuse`:
        a burst of requests with one new system prompt then prefills it once, and the others copy it as soon as it
        is there (prefilled beside each other, they would each pay for all of it on the same cores)."""
        prompt, adapters = sequence.prompt, sequence.request.adapters
        return any(self.cache.reusable(self.cache.held(seq.prompt, len(seq.prompt), seq.request.adapters),
                                       prompt, adapters, sequence.positions)
                   - reuse >= COPY_MIN_GAIN for seq in prefilling)

    def plan(self, running: list[Sequence], free_slots: list[int], waiting: int, idle: bool,
             adapters: AdapterSet = NO_ADAPTERS) -> StepPlan:
        """The step's calls, laid out alike whatever the load: llama.cpp's numerics for a row follow how its prompt
        was cut into llama_decode calls, and with one KV stream per slot it re-splits a call that mixes sequences
        (split_equal). So each prefill chunk is its own call, one sequence's tokens, cut on multiples of the cache's
        grid (chunk_grid; only a prompt's end falls between) and never a lone last row where the grid leaves room;
        decode rows share one call, by slot order. llama.cpp applies LoRA adapters to a whole context, so a step
        runs under one adapter set and the sets take turns (adapter_turns.py says when a turn ends).

        `idle`: the engine has had nothing to do for a while, so settling a free slot costs nobody; `adapters`:
        the LoRA adapter set the context holds now."""
        working = [seq for seq in running if seq.state in (SequenceState.PREFILLING, SequenceState.DECODING)]
        wanted = list(dict.fromkeys(seq.request.adapters for seq in working))
        turn = self.turns.choose(wanted, adapters, self.pace.switch_s, time.monotonic())
        serving = [seq for seq in working if seq.request.adapters == turn]
        decode = sorted((s for s in serving if s.state is SequenceState.DECODING), key=lambda s: s.slot)
        grid = self.cache.grid
        prefill, budget = [], self.pace.prefill_tokens_beside_streams(self.budget, grid) if decode else self.budget
        for sequence in serving:  # in admission order: the oldest prompt finishes first
            if sequence.state is not SequenceState.PREFILLING:
                continue
            start, end = sequence.n_past, sequence.prefillable_until(sequence.n_past)
            if end <= start:  # its next token is an image still being encoded: the step goes on without it
                continue
            if end - start > budget:
                end = align_down(start + budget, grid)
                # Never leave a lone last row (see PrefixCache.reusable), where the grid leaves room: on a GPU's
                # grid of micro-batches a cold prefill is cut the same way, so the lone row is its too.
                if len(sequence.prompt) - end == 1 and end - grid > start:
                    end -= grid
            # A chunk ends where the prompt is checkpointed, and the runner saves the state there.
            end = next((pos for pos in self.cache.checkpoint_positions(len(sequence.prompt),
                                                                       sequence.request.checkpoints)
                        if start < pos < end), end)
            end = _outside_whole_media(sequence.request.media, start, end)
            if end <= start:
                break
            prefill.append(Chunk(sequence, start, end))
            budget -= end - start
        settle = self.cache.unsettled(free_slots) if idle and not (waiting or running) else None
        return StepPlan(decode, prefill, settle, turn)
