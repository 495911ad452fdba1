#!/usr/bin/env python3
"""Per weight type: prefill and decode tok/s of each way exact mode can run, beside what llama-server runs, one run.

The test model is quantized again to each type by llama.cpp's own quantizer (cached under --out), and
bench/probes/prefillspeed.py (1,536-token prompt in 256-token chunks, then 64 decoded tokens, 3 rounds) runs it
in a fresh process per configuration, since ggml reads its settings once per process:
  llama.cpp default       flash attention by shape, f16 cells, default kernels: what llama-server and `fast` run
  exact                   exact mode on the batch-invariant build `make install` puts beside it (patches/llama.cpp,
                          GGML_CPU_BATCH_INVARIANT=1, K and V cells f16, Q4_K unrepacked; exactness/build_choice.py)
  exact, fallback         exact mode on llama-cpp-python's own library, as without that build: flash attention pinned
                          (K cells q8_0, V f16) and exactness/ggml_switches.py's fallback settings (GGML_CPU_TILED_MM=0,
                          Q4_K unrepacked)
Each exact column also says whether the load-time check (worker/engine/startup/load_check.py) lets exact mode reuse
answers there, and the last one which build the worker loads for the type (exactness/build_choice.py's rule).
Run: .venv/bin/python bench/run.py weights [--types q4_0,q4_1,...] [--publish]
(bench/WEIGHTS.md; docs/cache-and-exactness.md, "Per weight type")
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.config import REPO_DIR, find_model
from bench.report import publish
from worker.engine.host import BATCH_INVARIANT_DIR, LIB_PATH_ENV, SWITCH_ENV, EngineConfig, choose_library, default_dir

TYPES = ("q4_0", "q4_1", "q5_0", "q8_0", "f16", "bf16", "q4_k_m", "q6_k")
PROBE = REPO_DIR / "bench" / "probes" / "prefillspeed.py"
ROUNDS = re.compile(r"prefill (\d+) decode (\d+)")


def requantized(model: Path, qtype: str, folder: Path) -> Path:
    if qtype == "q4_1":
        return model  # the test model as shipped
    out = folder / f"smollm2-{qtype}.gguf"
    if not out.exists():
        code = ("import llama_cpp as L, sys; p = L.llama_model_quantize_default_params(); "
                f"p.ftype = L.LLAMA_FTYPE_MOSTLY_{qtype.upper()}; p.allow_requantize = True; "
                "sys.exit(L.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))")
        subprocess.run([sys.executable, "-c", code, str(model), str(out)], check=True, capture_output=True)
    return out


def exact_settings(path: Path, switch_on: bool) -> dict[str, str]:
    """The ggml environment and repacking exact mode chooses for this file
    (worker/engine/exactness/ggml_switches.py)."""
    from worker.engine.host import TILED_MM_ENV, choose_kernels

    kernels = choose_kernels(path, row_invariant=True, switch_on=switch_on)
    env = {} if kernels.tiled_mm else {TILED_MM_ENV: "0"}
    return env | ({} if kernels.repack else {"REPACK": "0"})


def answers_reused(path: Path, env: dict[str, str]) -> bool:
    """The load-time check, run as the worker runs it, in a fresh process with the same environment."""
    code = ("import sys; from pathlib import Path; from worker.engine.native.model import EngineConfig, LlamaModel; "
            "from worker.engine.startup.load_check import measure; "
            "m = LlamaModel(Path(sys.argv[1]), EngineConfig(ctx_size=1024, parallel=2)); "
            "print(measure(m).answers_reusable)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], env={**os.environ, **env}, cwd=REPO_DIR,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def speeds(path: Path, env: dict[str, str], shape: dict[str, str]) -> tuple[int, int]:
    """Best prefill and decode tok/s of prefillspeed.py's rounds (shape: its PROMPT and ROUNDS)."""
    out = subprocess.run([sys.executable, str(PROBE), str(path)], env={**os.environ, **env, **shape},
                         capture_output=True, text=True, check=True).stdout
    rounds = [(int(p), int(d)) for p, d in ROUNDS.findall(out)]
    return max(p for p, _ in rounds), max(d for _, d in rounds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="the GGUF to quantize from (default: the test model)")
    p.add_argument("--types", default=",".join(TYPES))
    p.add_argument("--out", type=Path, default=REPO_DIR / "bench" / "results")
    p.add_argument("--prompt-tokens", type=int, default=1536, help="prompt length, a multiple of 256")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fallback", action=argparse.BooleanOptionalAction, default=True,
                   help="also measure exact mode's fallback (llama-cpp-python's own library)")
    p.add_argument("--publish", action="store_true", help="write bench/WEIGHTS.md")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    model = find_model(args.model)
    default_build = {LIB_PATH_ENV: str(default_dir())}
    patched = {LIB_PATH_ENV: str(BATCH_INVARIANT_DIR), SWITCH_ENV: "1"}
    shape = {"PROMPT": str(args.prompt_tokens), "ROUNDS": str(args.rounds)}
    header = ["weights", "llama.cpp default prefill / decode", "exact prefill / decode", "answers reused"]
    if args.fallback:
        header += ["exact, fallback prefill / decode", "answers reused"]
    rows = ["| " + " | ".join([*header, "exact mode loads"]) + " |", "|---" * (len(header) + 1) + "|"]
    for qtype in args.types.split(","):
        path = requantized(model, qtype, args.out)
        base = speeds(path, {"ATTN": "fast", **default_build}, shape)

        def cell(pair: tuple[int, int]) -> str:
            return f"{pair[0]} / {pair[1]} ({pair[0] / base[0]:.2f}x / {pair[1] / base[1]:.2f}x)"

        # The worker applies exactness/ggml_switches.py itself, so answers_reused passes the build alone.
        exact = speeds(path, {**exact_settings(path, switch_on=True), "ATTN": "fast", **patched}, shape)
        cells = [qtype, f"{base[0]} / {base[1]}", cell(exact), "yes" if answers_reused(path, patched) else "no"]
        if args.fallback:
            fallback = speeds(path, {**exact_settings(path, switch_on=False), "ATTN": "pinned", **default_build},
                              shape)
            cells += [cell(fallback), "yes" if answers_reused(path, default_build) else "no"]
        rows.append("| " + " | ".join([*cells, choose_library(path, EngineConfig()).build]) + " |")
        print(rows[-1], flush=True)
    text = ("# Exact mode per weight type\n\nThe test model quantized again per type; tok/s on this machine's 2 "
            f"cores, {args.prompt_tokens:,}-token prompt, 64 decoded tokens, best of {args.rounds} rounds "
            "(`bench/probes/prefillspeed.py`); ratios to llama.cpp's default (what llama-server runs).\n\n"
            + "\n".join(rows) + "\n")
    name = "WEIGHTS.md" if args.prompt_tokens == 1536 else f"WEIGHTS-{args.prompt_tokens}.md"
    (args.out / name.lower()).write_text(text)
    if args.publish:
        publish(text, None, name, "")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
