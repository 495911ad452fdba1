"""llama.cpp's functions called keeping the GIL, for calls of nanoseconds on the engine thread. A ctypes call through
llama_cpp lets the GIL go, and the event loop's thread, woken by the step's hand-off (engine/handoff.py), takes it
there and keeps the engine thread waiting for its writes before the next llama_decode (47 us a step on one stream
for one such lookup: bench/probes/RESULTS.md, "One stream's step, part by part"); a lookup has no reason to let it
go."""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import llama_cpp


@cache
def gil_kept(name: str, argtypes: tuple[Any, ...], restype: Any) -> Any:
    """`name` from the library llama_cpp loaded (the same handle), its calls keeping the GIL."""
    library = llama_cpp.llama_cpp._lib
    function = getattr(ctypes.PyDLL(library._name, handle=library._handle), name)
    function.argtypes, function.restype = argtypes, restype
    return function
