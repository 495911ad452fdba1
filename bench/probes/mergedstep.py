"""Probe: a prefill chunk in the decode rows' own llama_decode call: what it costs, and whether any row changes.

While a slot between decoding slots prefills, the decode rows around it are two runs of adjacent slots, so two
micro-batches (bench/probes/slotruns.py), and its chunk a third call. In one call, in slot order, llama.cpp's
equal split takes one row of every slot (the chunk's first) as one micro-batch and the chunk's other rows as a
second. SLOTS slots hold CONTEXT cells each; slot MIDDLE prefills CHUNK more tokens while the others decode one
row each: two calls (decode rows, then the chunk) against one, timed (median of ROUNDS), and every logits row the
two ways give compared bitwise. The library is the one the worker would load for the file.
Run: .venv/bin/python bench/probes/mergedstep.py [MODEL.gguf]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.probes.slots import filled_slots

SLOTS, CONTEXT, CHUNK, MIDDLE, ROUNDS = 8, 400, 64, 3, 7


def main() -> None:
    described, model, rows = filled_slots(SLOTS, CONTEXT)
    decoding = [slot for slot in range(SLOTS) if slot != MIDDLE]
    decode = [(slot, CONTEXT, True) for slot in decoding]
    chunk = [(MIDDLE, CONTEXT + i, i == CHUNK - 1) for i in range(CHUNK)]
    in_order = sorted(decode + chunk, key=lambda row: (row[0], row[1]))

    def apart() -> float:
        return rows.decode(decode) + rows.decode(chunk)

    separate = rows.median_ms(apart, range(SLOTS), CONTEXT, ROUNDS)
    decode_ms = rows.median_ms(lambda: rows.decode(decode), range(SLOTS), CONTEXT, ROUNDS)
    chunk_ms = rows.median_ms(lambda: rows.decode(chunk), range(SLOTS), CONTEXT, ROUNDS)
    together = rows.median_ms(lambda: rows.decode(in_order), range(SLOTS), CONTEXT, ROUNDS)
    rows.decode(decode)
    alone = [rows.logits(i) for i in range(len(decode))]
    rows.decode(chunk)
    alone.append(rows.logits(CHUNK - 1))
    rows.rewind(range(SLOTS), CONTEXT)
    rows.decode(in_order)
    index = {row: i for i, row in enumerate(in_order)}
    merged = [rows.logits(index[row]) for row in decode] + [rows.logits(index[chunk[-1]])]
    print(f"{described}, slot {MIDDLE} prefilling {CHUNK}")
    print(f"   decode rows then the chunk, two calls   {separate:6.1f} ms (decode rows {decode_ms:.1f}, chunk "
          f"{chunk_ms:.1f})")
    print(f"   one call, in slot order                 {together:6.1f} ms")
    print(f"   every logits row bitwise equal: {merged == alone} ({sum(a == b for a, b in zip(merged, alone))} "
          f"of {len(alone)})")
    rows.close()
    model.close()


if __name__ == "__main__":
    main()
