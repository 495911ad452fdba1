"""Probe: what each patched kernel costs against llama.cpp's own, op by op (bench/probes/opspeed.cpp).

Flash attention and weight products alone, 30 copies of one op in a graph (cold caches, as in a model), on
llama-cpp-python's own ggml and on the batch-invariant build with GGML_CPU_BATCH_INVARIANT=1, alternated, median of
the rounds. The table gives each side's time a pass and the patched one's as a share of llama.cpp's own (under 1:
faster). --threads 1 --cpu-time by default: on a machine other work keeps busy, ggml's threads spin at their barriers
while one waits for a core, and two threads' wall times say little; one thread's CPU time still says what a kernel
costs (not how it spreads over threads: llama.cpp splits a lone decode row's cells over the threads, the patched
kernel its heads).
Compiles opspeed.cpp with g++ against the vendored llama.cpp's headers (scripts/build-llama-cpp unpacks them).
Run: python bench/probes/opspeed.py [--rounds 3] [--threads 1] [--wall]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from worker.engine.exactness.build_choice import BATCH_INVARIANT_DIR, SWITCH_ENV, default_dir  # noqa: E402

SOURCE = Path(__file__).with_name("opspeed.cpp")
LAYERS = 30
# (label, arguments after the thread count is spliced in): one decode row at three cache sizes, 8 streams decoding,
# prefill chunks of 16, 64 and 512 rows, and one-row and 512-row products of the weight types the patches touch.
CASES = [
    ("attention, 1 row, 512 cells", ["fa", "512", "1", "1"], 20),
    ("attention, 1 row, 1,536 cells", ["fa", "1536", "1", "1"], 10),
    ("attention, 1 row, 6,144 cells", ["fa", "6144", "1", "1"], 3),
    ("attention, 8 streams x 1 row, 1,536 cells", ["fa", "1536", "1", "8"], 2),
    ("attention, 16 rows, 1,536 cells", ["fa", "1536", "16", "1"], 2),
    ("attention, 64 rows, 1,536 cells", ["fa", "1536", "64", "1"], 1),
    ("attention, 512 rows, 1,536 cells", ["fa", "1536", "512", "1"], 1),
    ("Q4_K 576x1536, 1 row", ["mm", "q4_K", "1536", "576", "1"], 50),
    ("Q6_K 576x1536, 1 row", ["mm", "q6_K", "1536", "576", "1"], 50),
    ("F16 576x1536, 1 row", ["mm", "f16", "1536", "576", "1"], 50),
    ("Q4_K 576x1536, 512 rows", ["mm", "q4_K", "1536", "576", "512"], 1),
    ("F16 576x1536, 512 rows", ["mm", "f16", "1536", "576", "512"], 1),
]


def headers() -> Path:
    version = next(line.split("==")[1].split('"')[0] for line in (REPO / "pyproject.toml").read_text().splitlines()
                   if "llama-cpp-python==" in line)
    cache = Path(os.environ.get("LLM_WORKER_BUILD_CACHE", Path.home() / ".cache" / "llm-worker" / "llama.cpp"))
    return cache / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp" / "ggml" / "include"


def build(folder: Path) -> Path:
    binary = folder / "opspeed"
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{headers()}", str(SOURCE), "-o", str(binary),
                    f"-L{default_dir()}", "-lggml", "-lggml-base", "-lggml-cpu"], check=True)
    return binary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--wall", action="store_true", help="time the wall instead of the process's CPU time")
    args = parser.parse_args()
    sides = {"llama.cpp's own": {"LD_LIBRARY_PATH": str(default_dir())},
             "patched": {"LD_LIBRARY_PATH": str(BATCH_INVARIANT_DIR), SWITCH_ENV: "1"}}
    print(f"load average {os.getloadavg()[0]:.1f}; {args.threads} thread(s), {'wall' if args.wall else 'CPU'} time "
          f"a pass of {LAYERS} ops, median of {args.rounds} alternated rounds\n")
    print("| op | llama.cpp's own ms | patched ms | patched / own |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        binary = build(Path(folder))
        for label, op, iters in CASES:
            times: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(args.rounds):
                for side, env in sides.items():
                    out = subprocess.run([str(binary), *op, str(args.threads), str(iters), str(LAYERS)],
                                         env={**os.environ, **env}, capture_output=True, text=True, check=True)
                    cpu_us, wall_us, _ = out.stdout.split()
                    times[side].append(float(wall_us if args.wall else cpu_us) / 1000)
            own, patched = (statistics.median(times[side]) for side in sides)
            print(f"| {label} | {own:.2f} | {patched:.2f} | {patched / own:.2f} |", flush=True)


if __name__ == "__main__":
    main()
