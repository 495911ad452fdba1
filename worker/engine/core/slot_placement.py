"""Which free slot keeps a LoRA adapter set's rows on adjacent slots. llama.cpp cuts a call's rows into one
micro-batch per run of adjacent slots, each a whole pass over the weights, and a step holds one set's rows alone
(bench/probes/RESULTS.md, "Slots: one micro-batch per run of adjacent slots")."""

from __future__ import annotations

from worker.engine.kv.prefix_cache import ALIGN
from worker.engine.requests import AdapterSet

# Reuse worth giving up for an adjacent slot: a prefill of this many tokens costs about what one more micro-batch
# a step costs (~8 ms on the test model: bench/probes/RESULTS.md, "Slots"), paid for every step of the answer.
MOVE_MAX_CELLS = 4 * ALIGN


def beside_own_set(free_slots: list[int], running: dict[int, AdapterSet], adapters: AdapterSet) -> int:
    """The free slot nearest the running slots (slot -> set) of `adapters`; with none running, the one farthest
    from the other sets' (lowest slot among equals). For a request that reuses little of any slot's cells, while
    requests under several sets run (core/scheduler.py, Scheduler._placed)."""
    own = [slot for slot, its_set in running.items() if its_set == adapters]
    others = [slot for slot, its_set in running.items() if its_set != adapters]

    def distance(slot: int, to: list[int]) -> int:
        return min((abs(slot - other) for other in to), default=len(free_slots) + len(running))

    return min(free_slots, key=lambda slot: (distance(slot, own) if own else 0, -distance(slot, others), slot))
