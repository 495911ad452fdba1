"""Which promise about greedy text holds where the worker runs, said once at startup: never a silent claim. It rests on
kernels that compute a row alike whatever its batch, which the code holds llama.cpp to on the cpu backend only
(exactness/, confirmed by startup/load_check.py; elsewhere: docs/cache-and-exactness.md, "On a GPU")."""

from __future__ import annotations

from dataclasses import dataclass

from worker.engine.modes import CacheMode
from worker.engine.startup.load_check import Numerics


@dataclass(frozen=True)
class Guarantee:
    name: str  # bitwise | cache-only | measured | none
    holds: str  # one sentence: what holds, and why

    @property
    def full(self) -> bool:
        """Greedy text independent of both the cache and the requests beside it."""
        return self.name == "bitwise"


# A GPU library picks its kernels by batch shape (ggml-cuda's matrix-vector kernels up to 8 rows, stream-K tiles
# beyond), which a check of a few shapes cannot cover: there the check's result is reported, and what holds by
# construction is the cache's part, prompts cut on whole micro-batches and only those reused (core/scheduler.py,
# chunk_grid).
def guarantee(mode: CacheMode, numerics: Numerics, backend: str, rpc: bool) -> Guarantee:
    where = f"the {backend} backend{' with --rpc' if rpc else ''}"
    if mode is CacheMode.FAST:
        return Guarantee("none", "fast mode: llama.cpp picks kernels by batch shape and the cache reuses cells as "
                                 "they were made, so greedy text may differ from a cold run and with the load")
    checked = numerics.batch_invariant is not None
    if backend != "cpu" or rpc:
        measured = (f"it measured decoded_cells_exact={numerics.decoded_cells_exact}, "
                    f"batch_invariant={numerics.batch_invariant} in the shapes it tried"
                    if checked else "it did not run")
        return Guarantee("measured", f"on {where} prompts are cut on micro-batches and the cache reuses "
                                     "whole prefilled micro-batches only, so greedy text does not depend on the prompt "
                                     "cache; llama.cpp picks kernels by batch shape, which the load-time check "
                                     f"cannot cover ({measured}): it may depend on the requests beside it; "
                                     "--parallel 1 keeps requests apart")
    if numerics.batch_invariant is False:
        return Guarantee("cache-only", f"on {where} a row's logits moved with the rows beside it in the load-time "
                                       "check: greedy text does not depend on the prompt cache, but may on the "
                                       "requests beside it")
    agreed = ", and the load-time check agreed" if checked else " (the load-time check did not run)"
    return Guarantee("bitwise", f"on {where} every row takes one kernel path whatever its batch{agreed}"
                                ": greedy text depends neither on the prompt cache nor on the requests beside it")
