"""Probe: what a decode call costs by which slots its rows are on, adjacent or not.

Each slot is a KV stream of its own, and llama.cpp views a micro-batch's streams as one range, so it cuts a call
into one micro-batch per run of adjacent slots (llama_batch_allocr::split_equal, sequential streams): 4 rows on
slots 0, 2, 4, 6 are 4 micro-batches. 8 slots each hold CONTEXT prefilled cells; one decode call per layout is
timed (median of ROUNDS). What worker/engine/core/slot_placement.py places requests of LoRA adapter sets by.
The library is the one the worker would load for the file (exactness/build_choice.py).
Run: .venv/bin/python bench/probes/slotruns.py [MODEL.gguf]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.probes.slots import filled_slots

SLOTS, CONTEXT, ROUNDS = 8, 120, 9
LAYOUTS = {"1 row": [0], "2 rows, adjacent": [0, 1], "4 rows, adjacent (0-3)": [0, 1, 2, 3],
           "4 rows, adjacent (4-7)": [4, 5, 6, 7], "4 rows, slots 0, 2, 4, 6": [0, 2, 4, 6],
           "4 rows, slots 0, 1, 6, 7": [0, 1, 6, 7], "8 rows, adjacent": list(range(SLOTS))}


def main() -> None:
    described, model, rows = filled_slots(SLOTS, CONTEXT)
    print(f"{described}; ms a decode call")
    for label, slots in LAYOUTS.items():
        call = [(slot, CONTEXT, True) for slot in slots]
        print(f"   {label:<28} {rows.median_ms(lambda: rows.decode(call), slots, CONTEXT, ROUNDS):6.1f}")
    rows.close()
    model.close()


if __name__ == "__main__":
    main()
