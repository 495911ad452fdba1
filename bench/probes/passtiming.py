"""Probe: the pass costs the drafting rule weighs, timed as the worker times them at load (the faster of two passes
of each row count, in an empty slot), on a quiet machine and beside busy processes (one spinning Python per core
but one: what a neighbour's build or a second server does to a 2-core machine).

Beside them every pass costs 1.5-2x, its ratio to the one-row pass about as on a quiet machine but for a spike
now and then. Once the neighbour is gone, serving measures the one-row pass at its quiet cost while the multi-row
passes keep their timed costs, twice too high against it: a worker timed so drafts nothing (docs/speculative.md,
"Timed beside a busy process"). Run: .venv/bin/python bench/probes/passtiming.py [MODEL]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from worker.engine.exactness.build_choice import choose_library, load_library
from worker.engine.host import EngineConfig
from worker.logs import configure

if TYPE_CHECKING:
    from bench.probes.rows import RowDecoder

ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 17)
ROUNDS = ("quiet", "busy", "busy", "busy", "quiet")


def timed(rows_of: RowDecoder, rows: int) -> float:
    samples = []
    for _ in range(2):
        samples.append(rows_of.decode([(0, pos, True) for pos in range(rows)]))
        rows_of.rewind([0], 0)
    return min(samples)


def main() -> None:
    configure("console", "warning")
    path, config = find_model(sys.argv[1] if len(sys.argv) > 1 else None), EngineConfig(parallel=1, ctx_size=1024)
    library = load_library(choose_library(path, config))  # exact mode's, as the worker loads it
    from bench.probes.rows import RowDecoder  # llama_cpp, with the library chosen
    from worker.engine.native.model import LlamaModel

    rows_of = RowDecoder(LlamaModel(path, config), max_rows=max(ROWS))
    print(f"{path.name}, {library.build} build")
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
