"""What a step computed, as the runner hands it to the step's update (core/step_update.py): the only way from one to
the other. The runner fills batches, decodes and samples; what the tokens mean for the answers (text, stop strings,
events, retirement, the cache's records) and what the calls' times teach (the pace, the drafts' costs) is the
update's."""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.prefix_cache import Settle
from worker.engine.requests import Event, FinishReason, TokenLogprob
from worker.engine.sequence import Sequence


@dataclass
class Drawn:
    """The tokens a sequence drew in one call's rows, in order: its decode row's and, while each equalled its draft's
    token, the next row's too; or a prompt's first token. Their cells are in the KV, but the last's."""

    seq: Sequence
    tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob | None] = field(default_factory=list)  # by token; None: not asked (or an end token)
    drafted: int = 0  # drafted tokens verified in the call
    accepted: int = 0  # of those, kept (tokens drawn: accepted + 1, or fewer where sampling failed)


@dataclass(frozen=True)
class Prefilled:
    """The sequence's prompt is all in the KV (a fork's: copied from its parent's): it decodes from now on."""

    seq: Sequence


@dataclass(frozen=True)
class Read:
    """What a prompt's rows were read for, before its first token."""

    seq: Sequence
    event: Event  # PromptLogprobs or Scored


@dataclass(frozen=True)
class Ended:
    """The sequence cannot go on: its call failed, its grammar allows no token, or its prompt alone was asked for."""

    seq: Sequence
    reason: FinishReason
    message: str = ""


Outcome = Drawn | Prefilled | Read | Ended


@dataclass(frozen=True)
class Call:
    """One timed llama_decode: its rows by slot, and whether it decoded streams' rows or prefilled a chunk."""

    rows: list[tuple[int, int]]  # (slot, rows)
    seconds: float
    prefill: bool

    @property
    def total(self) -> int:
        return sum(rows for _, rows in self.rows)


@dataclass(frozen=True)
class DecodeStep:
    """The step's decode rows, for what drafting yields (Speculator.observe_step)."""

    rows: int  # decode rows, one a sequence
    generated: int  # tokens drawn in them
    began: float  # perf_counter when drafting began; the update ends the step's time once the tokens are output
    drafted: bool  # whether any row carried a draft


@dataclass
class StepOutput:
    outcomes: list[Outcome] = field(default_factory=list)  # in order: a sequence's are applied as they come
    calls: list[Call] = field(default_factory=list)
    switched: bool = False  # the LoRA adapters changed before the step's first call: its time is the switch's too
    decode: DecodeStep | None = None
    checkpoints: list[tuple[int, Checkpoint]] = field(default_factory=list)  # (slot, its state where it was taken)
    settled: Settle | None = None  # a free slot's block prefilled again
    _ended: set[Sequence] = field(default_factory=set)

    def end(self, seq: Sequence, reason: FinishReason, message: str = "") -> None:
        self.outcomes.append(Ended(seq, reason, message))
        self._ended.add(seq)

    def ended(self, seq: Sequence) -> bool:
        """Whether the sequence ended in this step: its later rows are left out of the step's calls."""
        return seq in self._ended
