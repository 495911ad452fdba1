"""Checkpoints of a recurrent state: what a slot's recurrent layers (and sliding-window cells) held after its first
`pos` tokens, saved while the prompt is prefilled, so that a later prompt sharing those tokens goes on from there
(a recurrent state cannot be cut back: native/memory.py). Taken a few tokens before a prompt's end, where the
prompt of a chat's next turn stops sharing it, as llama-server takes its own (--ctx-checkpoints)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

# A prompt's checkpoint sits this many tokens before its end (then down to the grid in exact mode): the next turn
# of a chat resends the prompt whole but for its last few tokens, where a template may write the previous answer's
# turn otherwise (a reasoning dropped, its closing tag), as llama-server's newest checkpoint sits 4 tokens back.
TAIL = 4
# Checkpoints a slot keeps, the first (often where a system prompt other conversations share ends) and the newest:
# each one holds every recurrent layer's state.
PER_SLOT = 4


@dataclass(eq=False)
class Checkpoint:
    pos: int  # tokens the state has consumed: a prompt continues it from this position
    data: ctypes.Array  # llama_state_seq_get_data_ext's bytes, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY

    @property
    def size(self) -> int:
        return len(self.data)


def position(prompt_tokens: int, grid: int) -> int:
    """Where a prompt of this many tokens is checkpointed: TAIL tokens before its end, down to the grid (0: none)."""
    end = prompt_tokens - TAIL
    return max(0, end - end % grid)


def kept(checkpoints: list[Checkpoint], upto: int) -> list[Checkpoint]:
    """The checkpoints at or before position `upto`, in order, at most PER_SLOT: the first and the newest."""
    within = [checkpoint for checkpoint in checkpoints if checkpoint.pos <= upto]
    return within if len(within) <= PER_SLOT else [within[0], *within[1 - PER_SLOT:]]
