"""What a slot's memory lets the engine undo. Attention cells can be cut at any position; a recurrent state (Mamba,
RWKV, and the recurrent half of hybrids such as Qwen3.5, LFM2 or Nemotron-H) holds the whole history in one state,
so it can only be dropped whole, continued from its end, or, where the model keeps snapshots, rolled back a few
tokens (llama.cpp's n_rs_seq). llama_memory_seq_rm refuses any other cut and changes nothing."""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass

import llama_cpp

from worker.engine.native.gil_kept import gil_kept
from worker.worker_error import WorkerError


class Cuts(str, enum.Enum):
    ANYWHERE = "anywhere"  # attention cells only (full-size sliding windows included)
    LAST_TOKENS = "last-tokens"  # a recurrent state whose last few decoded tokens can be undone (n_rs_seq)
    WHOLE = "whole"  # a recurrent state: dropped whole, or continued from where it ends


@dataclass(frozen=True)
class MemoryKind:
    cuts: Cuts
    rollback: int = 0  # LAST_TOKENS: how many of the tokens one llama_decode added a cut may undo

    @property
    def cuts_anywhere(self) -> bool:
        return self.cuts is Cuts.ANYWHERE

    def undoes(self, tokens: int, decoded: int) -> bool:
        """Whether a cut may drop the last `tokens` of a slot whose last llama_decode added `decoded`: anywhere on
        attention cells; on a state with snapshots, fewer than the call added (undoing all of them would read a
        snapshot from before it, which llama.cpp hands back without refusing), and at most `rollback`."""
        if self.cuts_anywhere or tokens == 0:
            return True
        return self.cuts is Cuts.LAST_TOKENS and tokens < decoded and tokens <= self.rollback


def recurrent(model: llama_cpp.llama_model_p) -> bool:
    """Whether some of the model's layers keep a recurrent state (a recurrent or hybrid architecture)."""
    return bool(llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model))


def memory_kind(model: llama_cpp.llama_model_p, ctx: llama_cpp.llama_context_p) -> MemoryKind:
    """The context's memory as llama.cpp built it: its snapshots read back (llama.cpp keeps none for an architecture
    that cannot roll back, whatever n_rs_seq asked)."""
    if not recurrent(model):
        return MemoryKind(Cuts.ANYWHERE)
    snapshots = llama_cpp.llama_n_rs_seq(ctx)
    return MemoryKind(Cuts.LAST_TOKENS, snapshots) if snapshots else MemoryKind(Cuts.WHOLE)


def probe(kind: MemoryKind, ctx: llama_cpp.llama_context_p, token: int) -> None:
    """Check the kind against what llama.cpp does, as llama-server probes it: two tokens decoded in sequence 0, then
    the last one cut. Run once at warm-up, on the engine thread; leaves the memory empty."""
    batch = llama_cpp.llama_batch_init(2, 0, 1)
    handle = llama_cpp.llama_get_memory(ctx)
    try:
        for i in range(2):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = token, i, 1, 0, i
        batch.n_tokens = 2
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise WorkerError("warm-up decode of two tokens failed: the model cannot run on this build")
        cut = bool(llama_cpp.llama_memory_seq_rm(handle, 0, 1, -1))
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_memory_clear(handle, True)
    if cut != kind.undoes(1, 2):
        raise WorkerError(f"llama.cpp {'allowed' if cut else 'refused'} a cut its memory kind ({kind.cuts.value}) "
                          f"{'refuses' if cut else 'allows'}: this llama.cpp build handles memory in a way the worker "
                          "does not know; report it with the model's architecture")


def last_position(memory: llama_cpp.llama_memory_t, slot: int) -> int:
    """llama_memory_seq_pos_max, keeping the GIL (native/gil_kept.py): the slot's last position held (-1: none)."""
    return int(gil_kept("llama_memory_seq_pos_max", (ctypes.c_void_p, ctypes.c_int32), ctypes.c_int32)(memory, slot))
