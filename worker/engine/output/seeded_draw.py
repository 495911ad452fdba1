"""The sampler chain's last stage: a seeded random draw that uses all 64 bits of the seed. llama.cpp's own dist stage
seeds a 32-bit Mersenne Twister, so seeds that differ only above bit 32 (or by 2^32 - 1, its "random" marker) would
draw the same text. Also the 32-bit seed llama.cpp's own seeded stages (XTC, mirostat) take, made from all 64 bits."""

from __future__ import annotations

import ctypes
import secrets

import llama_cpp
import numpy as np

# llama_token_data is {int32 id; float logit; float p}: three 4-byte fields, read as float32 columns.
_FIELDS = 3
_LOGIT = 1
_NAME = b"seeded-draw"  # module-level, so the pointer the name callback returns stays valid


def random_seed() -> int:
    return secrets.randbits(64)


# Draws as llama.cpp's dist stage does (softmax over the candidates the earlier stages left, one uniform number, the
# first candidate whose running sum reaches it), from numpy's PCG64 seeded with the whole seed. A native
# llama_sampler whose apply calls back into Python: the object must outlive the chain it is added to (the chain
# frees the llama_sampler itself).
class SeededDraw:
    def __init__(self, seed: int) -> None:
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._iface = llama_cpp.llama_sampler_i()
        # Callbacks left NULL are optional in llama.cpp; ctypes needs them spelled as null pointers.
        for name, kind in llama_cpp.llama_sampler_i._fields_:
            setattr(self._iface, name, kind(0))
        self._iface.name = llama_cpp.llama_sampler_i_name(lambda _smpl: _NAME)
        self._iface.apply = llama_cpp.llama_sampler_i_apply(self._apply)
        self.sampler = llama_cpp.llama_sampler_init(ctypes.pointer(self._iface), None)

    def _apply(self, _smpl: llama_cpp.llama_sampler_p, cur_p: llama_cpp.llama_token_data_array_p) -> None:
        candidates = cur_p.contents
        n = candidates.size
        if n == 0:
            candidates.selected = -1
            return
        rows = ctypes.cast(candidates.data, ctypes.POINTER(ctypes.c_float))
        logits = np.ctypeslib.as_array(rows, shape=(n, _FIELDS))[:, _LOGIT]
        running = np.cumsum(np.exp(logits - logits.max(), dtype=np.float64))
        target = running[-1] * self._rng.random()
        candidates.selected = min(int(np.searchsorted(running, target)), n - 1)


# llama.cpp's LLAMA_DEFAULT_SEED: a native stage seeded with it seeds itself at random.
NATIVE_RANDOM = 0xFFFFFFFF


def native_seed(seed: int) -> int:
    """The 32-bit seed of llama.cpp's own stages that draw (mirostat) or roll a die (XTC), made from the request's
    64-bit seed: the first word of numpy's SeedSequence of it, in a stream apart from the draw's (spawn key 1),
    modulo 2^32 - 1, so never NATIVE_RANDOM. Every bit of the seed moves it: seeds that differ only above bit 32 seed
    these stages differently too, but for about one pair in 4 billion."""
    word = np.random.SeedSequence(seed, spawn_key=(1,)).generate_state(1)[0]
    return int(word) % NATIVE_RANDOM
