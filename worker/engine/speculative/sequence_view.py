"""What speculative decoding reads and writes of a sequence (engine/sequence.py's Sequence has it all): declared
here, so that this package sits below the sequence it drafts for, and the sequence can hold its DraftState."""

from __future__ import annotations

from typing import Protocol

from worker.engine.requests import Request
from worker.engine.speculative.draft_rule import DraftState


class DraftingSequence(Protocol):
    request: Request
    slot: int  # its slot: the drafts' rows, and a draft model's own sequence id
    generated: list[int]  # sampled tokens so far
    draft: DraftState | None  # set by Speculator.start for a sequence that drafts

    @property
    def prompt(self) -> list[int]: ...
