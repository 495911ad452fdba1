"""Probe: prefill and decode speed of one sequence under each set of kernels, alternated in one run.

Each round runs every set of kernels once, in a fresh process (one libllama per process), in turn (every other round
in reverse order); the table gives the median over the rounds and the ratio to llama.cpp's own kernels. A prompt of
N tokens is prefilled in 512-token micro-batches (llama-server's default), then 64 tokens are decoded one at a time
on its cells.
The sets are batchinvariance.py's (own, pinned, patched), plus patched-off: the patched library with its switch
off (it must compute as own does).
--threads 1 --cpu-time times the process's CPU time instead of the wall: on a machine other work keeps busy, ggml's
threads spin at their barriers while one of them waits for a core, and wall times of 2 threads grew 30x (load
average 6 on 2 cores); one thread's CPU time still says what a kernel costs.
Run: python bench/probes/kernelspeed.py [--types q4_1,...] [--prompts 1536,6144] [--rounds 3]
                                        [--kernels own,pinned,patched] [--patched DIR] [--threads 2] [--cpu-time]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from batchinvariance import kernel_env, load_model, quantized

UBATCH, DECODE = 512, 64


def measure(path: Path, prompt: int, threads: int, clock) -> dict[str, float]:
    """Prefill tok/s of `prompt` tokens and decode ms a token after them, under this process's environment."""
    import llama_cpp as L

    model = load_model(path)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = prompt + 2 * DECODE, UBATCH, UBATCH, 1
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED
    cells = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0}
    cp.type_k, cp.type_v = cells[os.environ["CACHE_K"]], cells[os.environ["CACHE_V"]]
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(UBATCH, 0, 1)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))

    def decode(first: int, count: int) -> None:
        batch.n_tokens = count
        for i in range(count):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = (7 * (first + i) + 101) % n_vocab, first + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == count - 1
        assert L.llama_decode(ctx, batch) == 0

    decode(0, 16)  # warm up: threads, buffers
    L.llama_memory_seq_rm(L.llama_get_memory(ctx), 0, -1, -1)
    start = clock()
    for at in range(0, prompt, UBATCH):
        decode(at, min(UBATCH, prompt - at))
    prefill = clock() - start
    start = clock()
    for at in range(prompt, prompt + DECODE):
        decode(at, 1)
    return {"prefill": prompt / prefill, "decode": (clock() - start) / DECODE * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", default="q4_1")
    parser.add_argument("--prompts", default="1536,6144")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kernels", default="own,pinned,patched")
    parser.add_argument("--patched", default=os.environ.get("PATCHED_LIB", ""))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu-time", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        clock = time.process_time if args.cpu_time else time.perf_counter
        print(json.dumps(measure(Path(args.child[0]), int(args.child[1]), args.threads, clock)))
        return
    flags = [f"--threads={args.threads}"] + (["--cpu-time"] if args.cpu_time else [])
    sets = args.kernels.split(",")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    for qtype in args.types.split(","):
        model = quantized(qtype)
        for prompt in map(int, args.prompts.split(",")):
            runs: dict[str, list[dict[str, float]]] = {k: [] for k in sets}
            for round_ in range(args.rounds):
                # every other round in reverse order: a drift of the machine over a round (other work starting, a
                # core's clock) then weighs on each set alike, not always on the one that runs last
                for kernels in sets if round_ % 2 == 0 else sets[::-1]:
                    env = {**os.environ, **kernel_env(kernels.removesuffix("-off"), qtype, args.patched)}
                    if kernels.endswith("-off"):
                        env.pop("GGML_CPU_BATCH_INVARIANT")
                    child = [sys.executable, __file__, *flags, "--child", str(model), str(prompt)]
                    out = subprocess.run(child, env=env, check=True, capture_output=True, text=True).stdout
                    runs[kernels].append(json.loads(out.strip().splitlines()[-1]))
            med = {k: {m: statistics.median(r[m] for r in runs[k]) for m in ("prefill", "decode")} for k in sets}
            base = med[sets[0]]
            clock = "CPU time" if args.cpu_time else "wall time"
            print(f"\n{qtype}, {prompt}-token prompt, {args.threads} thread(s), {clock}, median of {args.rounds} "
                  f"alternated rounds (load average {os.getloadavg()[0]:.1f})\n")
            print(f"| kernels | prefill tok/s | vs {sets[0]} | decode ms/token | vs {sets[0]} (speed) |")
            print("|---|---|---|---|---|")
            for k in sets:
                print(f"| {k} | {med[k]['prefill']:.0f} | {med[k]['prefill'] / base['prefill']:.2f}x "
                      f"| {med[k]['decode']:.2f} | {base['decode'] / med[k]['decode']:.2f}x |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
