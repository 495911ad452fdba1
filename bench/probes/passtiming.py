"""Probe: the pass costs the drafting rule weighs, timed as the worker times them at load (the faster of two passes
of each row count, in an empty slot), on a quiet machine and beside busy processes (one spinning Python per core
but one: what a neighbour's build or a second server does to a 2-core machine).

Beside them every pass costs about 2x, its ratio to the one-row pass about as on a quiet machine but for a spike
now and then. Once the neighbour is gone, serving measures the one-row pass at its quiet cost while the multi-row
passes keep their timed costs, twice too high against it: a worker timed so drafts nothing (docs/speculative.md,
"Timed beside a busy process"). Run: .venv/bin/python bench/probes/passtiming.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from bench.probes.rows import RowDecoder
from worker.engine import EngineConfig
from worker.engine.native.model import LlamaModel

ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 17)
ROUNDS = ("quiet", "busy", "busy", "busy", "quiet")


def timed(rows_of: RowDecoder, rows: int) -> float:
    samples = []
    for _ in range(2):
        samples.append(rows_of.decode([(0, pos, True) for pos in range(rows)]))
        rows_of.rewind([0], 0)
    return min(samples)


def main() -> None:
    model = LlamaModel(find_model(None), EngineConfig(parallel=1, ctx_size=1024))
    rows_of = RowDecoder(model, max_rows=max(ROWS))
    for _ in range(5):
        timed(rows_of, 1)
    print("round   | one row ms | each row count's cost / one row's")
    for label in ROUNDS:
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(max(1, (os.cpu_count() or 2) - 1))] if label == "busy" else []
        time.sleep(0.3)
        costs = {rows: timed(rows_of, rows) for rows in ROWS}
        for process in busy:
            process.kill()
            process.wait()
        print(f"{label:7} | {costs[1] * 1e3:10.1f} | " +
              " ".join(f"{rows}:{costs[rows] / costs[1]:.2f}" for rows in ROWS[1:]), flush=True)
    rows_of.close()


if __name__ == "__main__":
    main()
