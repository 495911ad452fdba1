"""Probe: what a pass costs when the cores are oversubscribed, by how long libgomp's threads spin at a barrier
(GOMP_SPINCOUNT, read once when the library loads: each setting runs in a process of its own).

Hosts: "quiet"; "spread", one spinning Python per core; "crowded", as many spinning Pythons all on the last core,
where the kernel's balancer then queues a decode's two threads on the other core: a thread spinning at a barrier
holds it for its whole tick while the thread it waits for cannot run (worker/engine/thread_waits.py).
Run: .venv/bin/python bench/probes/busy_host.py [MODEL]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model

ROWS = (1, 4, 16, 64)
SPINS = ("libgomp's default", "30000", "3000", "1000", "300")
HOSTS = ("quiet", "spread", "crowded")
REPEATS = 9


def spinners(host: str) -> list[subprocess.Popen]:
    cores = sorted(os.sched_getaffinity(0))
    if host == "quiet":
        return []
    pins = cores if host == "spread" else [cores[-1]] * len(cores)
    spin = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", spin, str(core)]) for core in pins]


def measure(path: Path) -> None:
    """In the child: each row count's median pass, on each host, in ms."""
    from worker.engine.host import EngineConfig, choose_library, load_library
    from worker.logs import configure

    configure("console", "warning")
    config = EngineConfig(parallel=1, ctx_size=1024)
    load_library(choose_library(path, config))  # exact mode's, as the worker loads it
    from bench.probes.rows import RowDecoder
    from worker.engine.native.model import LlamaModel

    rows_of = RowDecoder(LlamaModel(path, config), max_rows=max(ROWS))
    for host in HOSTS:
        busy = spinners(host)
        time.sleep(0.5)
        costs = []
        for rows in ROWS:
            samples = []
            for _ in range(REPEATS):
                samples.append(rows_of.decode([(0, pos, True) for pos in range(rows)]))
                rows_of.rewind([0], 0)
            costs.append(sorted(samples)[REPEATS // 2])
        for process in busy:
            process.kill()
            process.wait()
        print(f"{os.environ.get('GOMP_SPINCOUNT', SPINS[0]):>18} | {host:7} | " +
              " ".join(f"{rows}:{cost * 1e3:7.1f}" for rows, cost in zip(ROWS, costs)), flush=True)
    rows_of.close()


def main() -> None:
    path = find_model(sys.argv[1] if len(sys.argv) > 1 else None)
    if os.environ.get("BUSY_HOST_CHILD"):
        measure(path)
        return
    print(f"{path.name}, exact mode's build; median of {REPEATS} passes, ms by rows")
    print(f"{'GOMP_SPINCOUNT':>18} | host    | rows:ms")
    for spins in SPINS:
        env = {key: value for key, value in os.environ.items() if key not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
        if spins != SPINS[0]:
            env["GOMP_SPINCOUNT"] = spins
        subprocess.run([sys.executable, __file__, str(path)], env={**env, "BUSY_HOST_CHILD": "1"}, check=True)


if __name__ == "__main__":
    main()
