#!/usr/bin/env python3
"""llm-worker against llama-server under GuideLLM, a benchmark client no one here wrote (vLLM project's).

GuideLLM's concurrent profile (--streams: its streams, each sending its next request when the last one ends) sends
its own synthetic prompts (--prompt-tokens, counted with the model's tokenizer) for --output-tokens each (it sends
max_tokens and llama-server's ignore_eos, so every answer has that length), REQUESTS requests a level, streamed, to
/v1/completions; the servers are started as the throughput bench starts them, drafts off on both unless --drafts on.
--rounds R starts each server R times, in turn, the order reversed every other round: figures are medians over the
rounds, ratios each round's with their median and range. The figures are GuideLLM's own, read from its JSON output
(output tok/s: its server throughput's mean; ITL: its inter-token latency's mean; TTFT: its median and p99; request
latency: its mean); with --publish each run's console summary, as GuideLLM printed it, goes to
bench/results/guidellm/.

GuideLLM is not a dependency of the worker: it needs a virtual environment of its own (torch and transformers come
with it), and its tokenizer is made from the GGUF by transformers (the gguf package), as no hub is reached:
  python3 -m venv ~/.cache/llm-worker/outside/guidellm
  ~/.cache/llm-worker/outside/guidellm/bin/pip install guidellm==0.8.1 gguf
Run: .venv/bin/python bench/run.py guidellm [--rounds 3] [--streams 4,8] [--requests 16] [--publish]
(bench/GUIDELLM.md; docs/benchmarks.md, "An outside client")
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.config import (
    BENCH_DIR,
    DRAFT_LINES,
    DRAFTS,
    LLAMA_SERVER,
    WORKER,
    BenchConfig,
    add_drafts_flag,
    add_peer_flags,
    find_llama_server,
    find_model,
)
from bench.report import environment, machine_line, write_report, write_summary
from bench.rounds import alternated, each_ratio, medians, ratios_text
from bench.servers import running_server

VENV = Path.home() / ".cache" / "llm-worker" / "outside" / "guidellm"
CONSOLES = BENCH_DIR / "results" / "guidellm"
# Each level's figures, as GuideLLM's JSON names them: (our name, its metric, its statistic).
FIGURES = (
    ("output_tok_s", "output_tokens_per_second", "mean"),
    ("itl_mean_ms", "inter_token_latency_ms", "mean"),
    ("ttft_p50_ms", "time_to_first_token_ms", "median"),
    ("ttft_p99_ms", "time_to_first_token_ms", "p99"),
    ("latency_mean_s", "request_latency", "mean"),
)
COLUMNS = ("output tok/s (mean)", "ITL ms (mean)", "TTFT ms (p50)", "TTFT ms (p99)", "request latency s (mean)")


def tokenizer(model: Path, python: Path, out: Path) -> Path:
    """The model's tokenizer as transformers saves it, made from the GGUF itself (once per model file)."""
    folder = out / f"tokenizer-{model.stem}"
    if not (folder / "tokenizer.json").exists():
        make = ("import sys; from transformers import AutoTokenizer; "
                "AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2]).save_pretrained(sys.argv[3])")
        subprocess.run([str(python), "-c", make, str(model.parent), model.name, str(folder)], check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return folder


def scenario(url: str, args: argparse.Namespace, tokenizer_dir: Path, output: Path) -> dict[str, Any]:
    return {"spec": {
        "backend": {"kind": "openai_http", "target": url, "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": args.streams},
        "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer_dir)},
        "data": [{"kind": "synthetic_text", "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens}],
        "constraints": [{"kind": "max_requests", "count": args.requests}],
        "outputs": [{"kind": "json", "path": str(output)}],
    }}


def run_guidellm(url: str, args: argparse.Namespace, tokenizer_dir: Path, name: str) -> tuple[dict[str, Any], str]:
    """GuideLLM's JSON output of one run, and its console output (its own summary tables)."""
    runs = args.out / "guidellm-runs"
    runs.mkdir(parents=True, exist_ok=True)
    config, output = runs / f"{name}.scenario.json", runs / f"{name}.json"
    config.write_text(json.dumps(scenario(url, args, tokenizer_dir, output), indent=1))
    done = subprocess.run([str(args.guidellm), "run", "-c", str(config), "--disable-console-interactive"],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    if done.returncode != 0:
        raise RuntimeError(f"guidellm failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(output.read_text()), done.stdout


def figures(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per level ("N streams"), our names for GuideLLM's figures; a level with a failed request is refused."""
    levels = {}
    for benchmark in result["benchmarks"]:
        streams = benchmark["config"]["strategy"]["streams"]
        metrics = benchmark["metrics"]
        errored = metrics["request_totals"]["errored"]
        if errored:
            raise RuntimeError(f"{errored} requests failed at {streams} streams")
        levels[f"{streams} streams"] = {
            name: _statistic(metrics[metric]["successful"], statistic) for name, metric, statistic in FIGURES}
    return levels


def _statistic(distribution: dict[str, Any], statistic: str) -> float:
    value = distribution["percentiles"][statistic] if statistic.startswith("p") else distribution[statistic]
    return round(float(value), 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=8, ctx_size=8192, report="GUIDELLM.md")
    p.add_argument("--rounds", type=int, default=3, help="every server started once a round")
    p.add_argument("--streams", type=lambda text: [int(n) for n in text.split(",")], default=[4, 8])
    p.add_argument("--requests", type=int, default=16, help="requests a level (GuideLLM's max_requests)")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--guidellm", type=Path, default=VENV / "bin" / "guidellm")
    add_drafts_flag(p)
    args = p.parse_args(argv)
    if not args.guidellm.exists():
        p.error(f"no GuideLLM at {args.guidellm}: install it as this module's docstring says, or pass --guidellm")
    cfg = BenchConfig(
        model=find_model(args.model), servers=(WORKER, LLAMA_SERVER), prompt_lengths=(), concurrencies=(),
        requests_per_client=1, level_timeout_s=0, max_tokens=args.output_tokens, parallel=args.parallel,
        ctx_size=args.ctx_size, threads=args.threads, temperature=0.0, seed=0,
        llama_server_bin=find_llama_server(args.llama_server), out_dir=args.out, publish=args.publish,
        worker_args=DRAFTS[args.drafts][0], peer_args=DRAFTS[args.drafts][1],
    )
    env = {**environment(cfg), "drafts": args.drafts, "rounds": args.rounds}
    tokenizer_dir = tokenizer(cfg.model, args.guidellm.parent / "python", args.out)
    version = subprocess.run([str(args.guidellm), "--version"], capture_output=True, text=True).stdout.split()[-1]
    by_round: dict[tuple[str, int], dict[str, dict[str, float]]] = {}
    consoles = {}
    for n, server in alternated(cfg.servers, args.rounds):
        with running_server(server, cfg) as (url, _proc, _sampler, _startup_s, _argv):
            result, consoles[server, n] = run_guidellm(url, args, tokenizer_dir, f"{server}-{n}")
        by_round[server, n] = figures(result)
    levels = list(by_round[WORKER, 0])
    results = {server: {level: medians([by_round[server, n][level] for n in range(args.rounds)]) for level in levels}
               for server in cfg.servers}
    pairs = {level: [(by_round[WORKER, n][level]["output_tok_s"], by_round[LLAMA_SERVER, n][level]["output_tok_s"])
                     for n in range(args.rounds)] for level in levels}
    lines = ["# llm-worker under GuideLLM", "", machine_line(cfg, env),
             f"- client: GuideLLM {version}, its concurrent profile at {', '.join(map(str, args.streams))} streams, "
             f"{args.requests} requests a level, synthetic {args.prompt_tokens}-token prompts and "
             f"{args.output_tokens}-token answers (max_tokens and ignore_eos), streamed, /v1/completions",
             f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads; drafts "
             f"{DRAFT_LINES[args.drafts]}",
             f"- {args.rounds} rounds, every server started once a round, the order reversed every other round; "
             "medians over the rounds; GuideLLM's own figures", "",
             "| server | level | " + " | ".join(COLUMNS) + " |", "|---" * (2 + len(COLUMNS)) + "|"]
    for server, by_level in results.items():
        lines += [f"| {server} | {level} | " + " | ".join(f"{row[name]:,.1f}" for name, _, _ in FIGURES) + " |"
                  for level, row in by_level.items()]
    lines += ["", "llm-worker / llama-server output tok/s, each round's ratio, their median and range: "
              + "; ".join(f"{level} {ratios_text([ours / theirs for ours, theirs in pairs[level]])}"
                          for level in levels)]
    if args.publish:
        write_summary("guidellm", env, results, {LLAMA_SERVER: {level: {"output_tok_s": each_ratio(pairs[level])}
                                                                for level in levels}})
        CONSOLES.mkdir(parents=True, exist_ok=True)
        for (server, n), console in consoles.items():
            (CONSOLES / f"round-{n}-{server}.txt").write_text(console)
    write_report("\n".join(lines) + "\n", args.out, "guidellm.md", "GUIDELLM.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
