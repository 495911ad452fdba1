"""Which free slot keeps a LoRA adapter set's rows on adjacent slots.

Each slot is a KV stream of its own (native/model.py), and llama.cpp views the streams of one micro-batch as one
range: it cuts a call's rows into one micro-batch per run of adjacent slots (llama_batch_allocr::split_equal with
sequential streams), each paying a whole pass over the weights. The steps of one adapter set hold only that set's
rows (adapter_turns.py), so a set whose requests sit on slots 0, 2, 4, 6 decodes its 4 rows in 4 passes, longer
than 8 rows on adjacent slots take (bench/probes/RESULTS.md, "Slots: one micro-batch per run of adjacent slots").
So while requests under several sets run, a request that reuses little of any slot's cells goes next to its own
set's slots, or, if none of its set runs, as far as it can from the other sets'.
"""

from __future__ import annotations

from worker.engine.kv.prefix_cache import ALIGN
from worker.engine.requests import AdapterSet

# Reuse worth giving up for an adjacent slot: a prefill of this many tokens costs about what one more micro-batch
# a step costs (~8 ms on the test model), and the placement pays for every step of the answer.
MOVE_MAX_CELLS = 4 * ALIGN


def beside_own_set(free_slots: list[int], running: dict[int, AdapterSet], adapters: AdapterSet) -> int:
    """The free slot nearest the running slots (slot -> set) of `adapters`; with none running, the one farthest
    from the other sets' (lowest slot among equals)."""
    own = [slot for slot, its_set in running.items() if its_set == adapters]
    others = [slot for slot, its_set in running.items() if its_set != adapters]

    def distance(slot: int, to: list[int]) -> int:
        return min((abs(slot - other) for other in to), default=len(free_slots) + len(running))

    return min(free_slots, key=lambda slot: (distance(slot, own) if own else 0, -distance(slot, others), slot))
