"""The engine thread: queue in, one step at a time, events out. Idle, it does its IdleWork once (settling free
slots, timing draft passes again) and otherwise sleeps on a condition, burning no CPU."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

import structlog

from worker.engine.core.cell_watch import CellWatch
from worker.engine.core.draft_passes import DraftPasses, PassPlace
from worker.engine.core.runner import ModelRunner
from worker.engine.core.scheduler import Pace, Scheduler, SchedulerStats, chunk_budget, chunk_grid
from worker.engine.core.step_update import Events, StepUpdate
from worker.engine.core.token_output import finished_event
from worker.engine.errors import QueueFull
from worker.engine.kv.cell_transfer import CellTransfer
from worker.engine.kv.held_cells import HeldCells
from worker.engine.kv.host_cache import HostCache, SavedCells
from worker.engine.kv.prefix_cache import PrefixCache
from worker.engine.modes import CacheMode, SpecType
from worker.engine.native.memory import Cuts
from worker.engine.native.model import LlamaModel
from worker.engine.native.projector import Projector
from worker.engine.pooling.embeddings import EMBEDDINGS, RANK, Embedder, EmbeddingJob
from worker.engine.requests import FinishReason
from worker.engine.sequence import Sequence, SequenceState
from worker.engine.speculative.draft_model import DraftModel
from worker.engine.speculative.speculator import PromptLookup, Speculator

Dispatch = Callable[[Events], None]
T = TypeVar("T")
log = structlog.get_logger(__name__)


class IdleWork(Enum):
    """Work the engine does when no request needs it, each once it has been idle this many seconds."""

    # Free slots are settled (see PrefixCache.unsettled): a person reading an answer leaves seconds, while a client
    # that sends its next request at once would only wait.
    SETTLE = 0.25
    # Passes timed again, a row count a step (Speculator.pass_to_time_again): later than settling, so that what
    # else ran on the machine in the meantime has had its moment too.
    TIME_PASSES = 1.0


@dataclass(eq=False)
class CellTask:
    """Work on slots' cells, on the engine thread between steps: at once, or for `slot` once no request holds it
    and no stream copy involves it (as llama-server defers a slot action until its slot is idle)."""

    run: Callable[[], Any]
    slot: int | None = None
    done: Future = field(default_factory=Future)


class EngineLoop:
    def __init__(self, model: LlamaModel, cache_mode: CacheMode, dispatch: Dispatch,
                 projector: Projector | None = None) -> None:
        self.model = model
        self.config = model.config
        self._dispatch = dispatch
        self._cond = threading.Condition()
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._free_slots = list(range(self.config.parallel))
        self._stopping = False
        host = HostCache(self.config.cache_ram) if self.config.cache_ram else None
        budget = chunk_budget(self.config)
        self.cache = PrefixCache(cache_mode, self.config.parallel, host, chunk_grid(self.config),
                                 model.memory_kind.cuts_anywhere)
        pace = Pace()
        self._scheduler = Scheduler(self.cache, budget, pace)
        self.speculator = speculator(model)
        # A step's rows: a prefill chunk, or every slot's decode row with its draft.
        rows = max(budget, self.config.parallel * (1 + (self.config.draft_max if self.speculator else 0)))
        self._cells = CellTransfer(model, self.cache)  # cells between slots, host memory and files
        self._runner = ModelRunner(model, self.cache, self._cells, rows, self.speculator, projector, self._wake)
        self._update = StepUpdate(model, self.cache, self._cells, pace, self.speculator)
        self._passes = DraftPasses(model, self._cells, max(self.speculator.timed_rows)) if self.speculator else None
        # Embedding and rank jobs decode in pooled contexts of their own (those the model has), but on this thread:
        # never two llama_decode calls at once. Each has its queue.
        contexts = {EMBEDDINGS: model.embedding, RANK: model.ranking}
        # Fast mode promises no batch invariance: its inputs are packed without filler rows.
        aligned = cache_mode is not CacheMode.FAST
        self._pooled = {kind: (Embedder(pooled, aligned), deque[EmbeddingJob]()) for kind, pooled in contexts.items()
                        if pooled is not None}
        self._tasks: list[CellTask] = []
        # (steps, seconds in them, of those inside llama_decode), replaced whole at each step's end: a reader on
        # another thread sees completed steps only, never a step's llama_decode time without the step's own.
        self._totals = (0, 0.0, 0.0)
        self._busy_until = 0.0  # monotonic time the last request left or arrived
        self._watch: CellWatch | None = None  # what hears of the reusable cells (KV events); None: nothing
        self._keep_passes: Callable[[dict[int, float]], None] | None = None  # measure_passes' `keep`

    def watch_cells(self, changed: Callable[[list[HeldCells]], None]) -> None:
        """Call `changed` on this thread with the reusable cells of every slot and host-memory entry, now (at the
        next step) and after every step that changed them (cell_watch.py)."""
        with self._cond:
            self._watch = CellWatch(self.cache, changed)
            self._tasks.append(CellTask(lambda: None))  # a step soon, idle or not, which looks
            self._cond.notify()

    # -- called from other threads -------------------------------------------------

    def add(self, sequence: Sequence) -> None:
        self._enqueue(self._waiting, sequence, "requests")

    def add_pooled(self, kind: str, job: EmbeddingJob) -> None:
        """An embedding (EMBEDDINGS) or rank (RANK) job, for a model loaded with that context."""
        self._enqueue(self._pooled[kind][1], job, f"{kind} requests")

    def _enqueue(self, queue: deque, item: Sequence | EmbeddingJob, what: str) -> None:
        with self._cond:
            if len(queue) >= self.config.max_queue:
                raise QueueFull(f"{len(queue)} {what} are already waiting")
            queue.append(item)
            self._cond.notify()

    def on_slot(self, slot: int, action: Callable[[CellTransfer], T]) -> Future[T]:
        """Run `action` on the engine thread once `slot` is free: its result, or its exception, in the future."""
        return self._call(CellTask(lambda: action(self._cells), slot))

    def free_slots_cells(self, known: Callable[[list[int], int], bool]) -> Future[tuple[list[SavedCells],
                                                                                         list[list[int]]]]:
        """On the engine thread, between steps: the free slots' cells worth a file (CellTransfer.snapshots)."""
        return self._call(CellTask(lambda: self._cells.snapshots(list(self._free_slots), known)))

    def busy_slots(self) -> set[int]:
        with self._cond:
            return set(range(self.config.parallel)) - set(self._free_slots)

    def _call(self, task: CellTask) -> Future:
        with self._cond:
            if self._stopping:
                task.done.set_exception(RuntimeError("the worker is shutting down"))
            else:
                self._tasks.append(task)
                self._cond.notify()
        return task.done

    def _wake(self) -> None:
        """Something a sleeping step waits for happened (an image encoded)."""
        with self._cond:
            self._cond.notify()

    def cancel(self, sequence: Sequence) -> None:
        with self._cond:
            sequence.cancelled = True
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def stats(self) -> SchedulerStats:
        # Under the lock: admission moves a sequence from waiting to running while holding it, and a read between
        # the two saw neither (a drain that began then stopped at once and closed the listener on a live stream).
        with self._cond:
            running = list(self._running)
            queued = list(self._waiting)
            waiting = len(queued) + sum(len(queue) for _, queue in self._pooled.values())
        totals = self._totals
        return SchedulerStats(
            running=len(running),
            waiting=waiting,  # unanswered embedding and rank requests too: drain waits for them
            slots=self.config.parallel,
            # From positions, not native calls: running sequences hold n_past cells each.
            kv_cells_used=sum(seq.n_past for seq in running),
            kv_cells_cached=sum(self.cache.cells_held(slot) for slot in list(self._free_slots)),
            cache_ram_bytes=self.cache.host.bytes_held if self.cache.host else 0,
            cache_ram_limit_bytes=self.cache.host.limit_bytes if self.cache.host else 0,
            kv_cells_total=self.model.n_ctx,
            steps=totals[0],
            step_s=totals[1],
            decode_s=totals[2],
            adapter_switches=self.model.adapters.switches,
            untimed_pass_rows=tuple(self.speculator.untimed) if self.speculator else (),
            running_adapters=_adapters_of(running),
            waiting_adapters=_adapters_of(queued),
        )

    # -- the engine thread ---------------------------------------------------------

    def measure_passes(self, known: dict[int, float] | None, keep: Callable[[dict[int, float]], None]) -> None:
        """Before serving, with drafting on: what a pass of each draft size costs (timed in slot 0, left empty), or
        `known`, what a start with the same model, flags and build timed. `keep` hears the costs each time every row
        count has been timed here: at load, or once idle where startup left some untimed (busy cores) or serving
        found them timed beside a busy process; the next start reuses what it last heard (startup/check_record.py)."""
        if self.speculator:
            passes = self._passes
            assert passes is not None  # drafting times its passes
            self._keep_passes = keep
            if self.speculator.time_passes_at_load(lambda rows: passes.time_pass(rows, PassPlace(0, 0)), known):
                keep(dict(self.speculator.timed_passes))

    def stop_drafting(self) -> None:
        """Before serving: no drafts from here on (--spec-type auto where the load-time check found that drafts could
        change the text)."""
        if self.speculator:
            self.speculator.close()
            self.speculator = self._runner.speculator = self._update.speculator = None

    def run(self) -> None:
        try:
            while self._step():
                pass
        finally:
            self._finish_all(FinishReason.CANCELLED, "the worker is shutting down")
            self._runner.close()
            if self._passes is not None:
                self._passes.close()
            if self.speculator:
                self.speculator.close()
            for embedder, _ in self._pooled.values():
                embedder.close()

    # A step drops cancelled and timed-out requests, runs the cell tasks whose slots are free (files of cells in or
    # out: --kv-dir, the /slots routes), admits waiting requests (the scheduler picks the slot and the cached prefix),
    # lets the runner carry out the scheduler's plan, and hands all the step's events to the event loop in one call.
    def _step(self) -> bool:
        events: Events = []
        with self._cond:
            work = self._wait_for_work()
            if self._stopping:
                return False
            if work is not IdleWork.TIME_PASSES:
                started = time.perf_counter()
                self._drop_ended(events)
                self._run_tasks()
                for admission in self._scheduler.admit(self._waiting, self._free_slots, self._running):
                    self._runner.start(admission)
                    self._running.append(admission.sequence)
                plan = self._scheduler.plan(self._running, self._free_slots, len(self._waiting),
                                            work is IdleWork.SETTLE, self.model.adapters.current)
                pooled = [(embedder, embedder.plan(queue)) for embedder, queue in self._pooled.values() if queue]
                if self._running or self._waiting:
                    self._busy_until = time.monotonic()
        if work is IdleWork.TIME_PASSES:
            self._time_a_pass_again()
            return True
        self._update.apply(self._runner.run(plan), events)
        self._collect_finished()
        self._runner.streams_decode(any(seq.state is SequenceState.DECODING for seq in self._running))
        if events:
            self._dispatch(events)
        for embedder, rows in pooled:  # after the step's tokens are on their way
            if rows:
                embedder.run(rows)
        if self._watch is not None:
            self._watch.after_step(self._free_slots, self._running)
        steps, step_s, _ = self._totals
        self._totals = (steps + 1, step_s + time.perf_counter() - started, self._runner.decode_s)
        return True

    def _wait_for_work(self) -> IdleWork | None:
        """Sleep until there is a request to serve (None) or idle work is due."""
        # (a running prompt whose next token is an image still being encoded has nothing to do till it is)
        while not (any(not seq.waits_for_encoder() for seq in self._running) or self._waiting or self._stopping
                   or any(q for _, q in self._pooled.values()) or self._runnable_tasks()):
            work = self._idle_work()
            if work is None:
                self._cond.wait()
                continue
            idle = time.monotonic() - self._busy_until
            if idle >= work.value:
                return work
            self._cond.wait(work.value - idle)
        return None

    def _idle_work(self) -> IdleWork | None:
        if self.cache.unsettled(self._free_slots) is not None:
            return IdleWork.SETTLE
        if (self.speculator and self.speculator.pass_to_time_again(time.monotonic()) is not None
                and self._pass_place() is not None):
            return IdleWork.TIME_PASSES
        return None

    def _pass_place(self) -> PassPlace | None:
        assert self.speculator is not None and self._passes is not None  # only drafting times passes
        return self._passes.place(self._free_slots, max(self.speculator.timed_rows))

    def _time_a_pass_again(self) -> None:
        """One row count's pass timed again, in a free slot past its cells (outside the lock: a request that
        comes meanwhile waits for this pass alone; only this thread changes the free slots and what is due)."""
        speculator, passes, place = self.speculator, self._passes, self._pass_place()
        assert speculator is not None and passes is not None and place is not None  # _idle_work found them
        rows = speculator.pass_to_time_again(time.monotonic())
        assert rows is not None
        if speculator.timed_again(rows, passes.time_pass(rows, place)):
            log.info("passes_timed", again=True, ms=speculator.costs.milliseconds)
            # Timed past the fewest cells a free slot holds, near their cost in an empty one (pass_place).
            if self._keep_passes is not None and speculator.all_passes_timed:
                self._keep_passes(dict(speculator.timed_passes))

    def _runnable_tasks(self) -> list[CellTask]:
        return [task for task in self._tasks if task.slot is None or
                (task.slot in self._free_slots and not self._cells.copying(task.slot))]

    def _run_tasks(self) -> None:
        for task in self._runnable_tasks():
            self._tasks.remove(task)
            try:
                task.done.set_result(task.run())
            except Exception as exc:  # the caller's to answer; the engine goes on
                task.done.set_exception(exc)

    def _drop_ended(self, events: Events) -> None:
        """Cancelled and timed-out requests leave before the step is planned."""
        now = time.monotonic()

        def ending(seq: Sequence) -> tuple[FinishReason, str] | None:
            if seq.cancelled:
                return FinishReason.CANCELLED, "cancelled"
            if now >= seq.deadline:
                return FinishReason.TIMEOUT, f"the request ran past its {seq.request.timeout_s:g} s timeout"
            return None

        for seq in list(self._waiting):
            if (end := ending(seq)) is not None:
                self._waiting.remove(seq)
                _finish_waiting(seq, *end, events)
        for seq in self._running:
            if (end := ending(seq)) is not None:
                self._update.retire(seq, end[0], events, end[1])
        self._collect_finished()

    def _collect_finished(self) -> None:
        """Sequences the step's update retired give their slots back."""
        for seq in [s for s in self._running if s.state is SequenceState.FINISHED]:
            self._running.remove(seq)
            self._free_slots.append(seq.slot)

    def _finish_all(self, reason: FinishReason, message: str) -> None:
        events: Events = []
        with self._cond:
            for seq in self._running:
                self._update.retire(seq, reason, events, message)
            self._collect_finished()
            while self._waiting:
                _finish_waiting(self._waiting.popleft(), reason, message, events)
            for embedder, queue in self._pooled.values():
                embedder.fail_all(queue, message)
            for task in self._tasks:
                task.done.set_exception(RuntimeError(message))
            self._tasks.clear()
        if events:
            self._dispatch(events)


def speculator(model: LlamaModel) -> Speculator | None:
    """The worker's speculative decoding, as --spec-type asks and the model's memory allows; None: none. A recurrent
    state with snapshots undoes at most as many tokens as it keeps; one without is checkpointed before a draft is
    verified (core/runner.py: _checkpoints_before_verifying), which undoes any length."""
    config, memory = model.config, model.memory_kind
    if config.drafting is SpecType.NONE or config.draft_max == 0:
        return None
    draft_max = config.draft_max if memory.cuts is not Cuts.LAST_TOKENS else min(config.draft_max, memory.rollback)
    if config.drafting is SpecType.DRAFT:
        assert config.model_draft is not None, "--spec-type draft needs --model-draft (settings.py refuses it without)"
        return Speculator(config, DraftModel(config.model_draft, config, model), draft_max)
    return Speculator(config, PromptLookup(), draft_max)


def _finish_waiting(seq: Sequence, reason: FinishReason, message: str, events: Events) -> None:
    """A request that never got a slot ends, and its forks (which wait with it) too."""
    for each in (seq, *seq.forks):
        each.state = SequenceState.FINISHED
        events.append((each, finished_event(each, reason, message)))


def _adapters_of(sequences: list[Sequence]) -> tuple[int, ...]:
    """The LoRA adapters the sequences run under, each once, in id order."""
    return tuple(sorted({adapter for seq in sequences for adapter, _ in seq.request.adapters.scales}))
