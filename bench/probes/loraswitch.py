"""Probe: what LoRA adapters cost a step, and what switching the context between two of them costs.

llama.cpp applies adapters to a whole context, so rows under two adapter sets take two llama_decode calls, and each
change of set makes llama.cpp rebuild its compute schedule at the next call (llama_context::sched_reserve). Two
steering adapters (bench/adapters.py, rank 32 on one layer's feed-forward block) are made from the model, every
slot holds CONTEXT prefilled cells, and one decode step of SLOTS rows is timed (median of ROUNDS):

1. base model, one call; 2. adapter A, one call; 3. A, two calls of SLOTS/2 rows, no switch;
4. A and B, two calls of SLOTS/2 rows, one switch a step (what decoding every set every step would cost: why the
   sets take turns instead, worker/engine/core/adapter_turns.py);
5. a one-row call after a switch against one without: what a switch costs.
Then the logits of a row decoded in step 4 are compared bitwise with the same row decoded under its adapter alone.
The library is the one the worker would load for these files (exactness/build_choice.py).
Run: .venv/bin/python bench/probes/loraswitch.py [MODEL.gguf]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.adapters import PURPLE, ZEBRA, Base, steering_adapter
from bench.config import find_model
from worker.engine.config import EngineConfig, Lora
from worker.engine.exactness.build_choice import choose_library, load_library
from worker.logs import configure

SLOTS, CONTEXT, ROUNDS = 8, 300, 7
TOKENS = (ZEBRA, PURPLE)


def main() -> None:
    # At debug level llama.cpp's ~1,000 lines a schedule rebuild reach the console and triple a switch's time.
    configure("console", "warning")
    path = find_model(sys.argv[1] if len(sys.argv) > 1 else None)
    with tempfile.TemporaryDirectory() as tmp:
        base = Base.read(path)
        loras = tuple(Lora(steering_adapter(base, token, Path(tmp) / f"{token}.gguf"), str(token))
                      for token in TOKENS)
        config = EngineConfig(parallel=SLOTS, ctx_size=SLOTS * 1024, lora=loras)
        library = load_library(choose_library(path, config))
        run(path, config, library.build)


def run(path: Path, config: EngineConfig, build: str) -> None:
    from bench.probes.rows import RowDecoder  # llama_cpp, with the library chosen
    from worker.engine.native.model import LlamaModel
    from worker.engine.requests import NO_ADAPTERS, AdapterSet

    model = LlamaModel(path, config)
    rows = RowDecoder(model)
    switch = model.adapters
    a, b = AdapterSet.of({0: 1.0}), AdapterSet.of({1: 1.0})
    half = SLOTS // 2
    first = [(slot, CONTEXT, True) for slot in range(half)]
    second = [(slot, CONTEXT, True) for slot in range(half, SLOTS)]
    print(f"{path.name}, {build} build, {SLOTS} slots of {CONTEXT} cells; ms a step")
    rows.fill(range(SLOTS), CONTEXT)

    def step(calls: list[tuple[AdapterSet, list]]) -> float:
        seconds = 0.0
        for adapters, call in calls:
            switch.use(adapters)
            seconds += rows.decode(call)
        return seconds

    def timed(label: str, calls: list[tuple[AdapterSet, list]]) -> float:
        ms = rows.median_ms(lambda: step(calls), range(SLOTS), CONTEXT, ROUNDS)
        print(f"   {label:<48} {ms:6.1f}")
        return ms

    timed("1. base, one call", [(NO_ADAPTERS, first + second)])
    timed("2. adapter A, one call", [(a, first + second)])
    timed("3. A, two calls, no switch", [(a, first), (a, second)])
    # The context's set first, so each step switches once: A then B, then B then A.
    orders = iter([[(a, first), (b, second)], [(b, second), (a, first)]] * ROUNDS)
    timed_mixed = rows.median_ms(lambda: step(next(orders)), range(SLOTS), CONTEXT, 2 * ROUNDS)
    print(f"   {'4. A and B, two calls, one switch a step':<48} {timed_mixed:6.1f}")
    one = [(0, CONTEXT, True)]
    still = rows.median_ms(lambda: step([(a, one)]), [0], CONTEXT, ROUNDS)
    turns = iter([a, b] * ROUNDS)
    switched = rows.median_ms(lambda: step([(next(turns), one)]), [0], CONTEXT, ROUNDS)
    print(f"5. a one-row call: {still:.1f} ms; after a switch {switched:.1f} ms")
    switch.use(a)
    rows.decode(first)
    alone = rows.logits(0)
    rows.rewind(range(SLOTS), CONTEXT)
    step([(b, second), (a, first)])
    print(f"6. slot 0's row under A beside B's call, bitwise equal to A alone: {rows.logits(0) == alone}")
    rows.close()
    model.close()


if __name__ == "__main__":
    main()
