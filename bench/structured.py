#!/usr/bin/env python3
"""Structured output's cost: single-stream decode tok/s with and without a json_schema, llm-worker vs llama-server.

Each server loads the same GGUF with the same slots, context and threads, runs alone, and gets the same
requests one after another, streamed through /v1/chat/completions: R plain requests (EOS banned, so each
generates max_tokens) and R requests with response_format json_schema (a 30-property object, which the
grammar ends). Decode tok/s is per request, first token to end of stream, by the server's usage count. Also
measured in process: grammar setup for the schema (conversion, llama.cpp's parse check, the sampler).

Targets (issue 13): json_schema tok/s >= 0.8x the same server without it, >= 1.0x llama-server with the
same schema; grammar setup < 50 ms. llm-worker runs in its exact (default) and fast prefix-cache modes: fast lets
llama.cpp use flash attention, as llama-server does. --rounds R starts every server R times, in turn, the order
reversed every other round; the figures are medians over the rounds. Run: .venv/bin/python bench/run.py structured
[--rounds 3] [--publish]   (bench/STRUCTURED.md)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.chat import VARIANTS, Turn, chat_turn
from bench.client import new_session
from bench.config import LLAMA_SERVER, BenchConfig, add_peer_flags, find_llama_server, find_model
from bench.prompts import PromptFactory
from bench.report import environment, machine_line, publish, write_summary
from bench.rounds import alternated, medians
from bench.servers import running_server

_KINDS = [{"type": "string", "maxLength": 16}, {"type": "integer"}, {"type": "boolean"},
          {"enum": ["low", "medium", "high"]}, {"type": "number"}]
FIELDS = [f"field_{i:02d}" for i in range(30)]
SCHEMA = {"type": "object", "properties": {name: _KINDS[i % len(_KINDS)] for i, name in enumerate(FIELDS)},
          "required": FIELDS, "additionalProperties": False}
PROMPT = "Fill in a JSON record with the fields " + ", ".join(FIELDS) + " for request {n}."
MODES = ("plain", "json_schema")


@dataclass
class ServerResult:
    server: str
    round: int
    argv: list[str]
    samples: dict[str, list[Turn]] = field(default_factory=dict)
    valid_json: dict[str, int] = field(default_factory=dict)  # answers that parse as one JSON object


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


async def drive(url: str, args: argparse.Namespace, no_eos: dict[str, float], result: ServerResult) -> None:
    """Plain: EOS banned, max_tokens generated. json_schema: the grammar ends the answer."""
    extra = {"json_schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "record", "schema": SCHEMA, "strict": True}}}, "plain": {}}
    bans = {"json_schema": {}, "plain": no_eos}
    result.samples = {mode: [] for mode in MODES}
    result.valid_json = {mode: 0 for mode in MODES}
    async with new_session() as session:
        for n in range(-1, args.requests):  # -1: warm-up, so first-call costs stay out of the numbers
            for mode in MODES:  # interleaved, so a drifting machine load hits both alike
                turn = Turn(0, n)
                messages = [{"role": "user", "content": PROMPT.format(n=n)}]
                text = await chat_turn(session, url, messages, args.max_tokens, bans[mode], turn, extra[mode])
                if n >= 0:
                    result.samples[mode].append(turn)
                    result.valid_json[mode] += _is_object(text)


def setup_ms(model: Path, repeats: int = 20) -> dict[str, float]:
    """Median ms of each grammar setup step for SCHEMA, on the model's vocab, as the worker runs them."""
    import llama_cpp

    from worker.engine.host import GrammarSampler, grammar_problem
    from worker.schema_grammar import schema_grammar

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    loaded = llama_cpp.llama_model_load_from_file(str(model).encode(), params)
    vocab = llama_cpp.llama_model_get_vocab(loaded)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    steps: dict[str, list[float]] = {"convert": [], "check": [], "sampler": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        text = schema_grammar(SCHEMA)
        t1 = time.perf_counter()
        assert grammar_problem(vocab, text) is None
        t2 = time.perf_counter()
        GrammarSampler(vocab, text, n_vocab).free()
        t3 = time.perf_counter()
        for name, spent in zip(steps, (t1 - t0, t2 - t1, t3 - t2)):
            steps[name].append(spent * 1e3)
    llama_cpp.llama_model_free(loaded)
    medians = {name: statistics.median(values) for name, values in steps.items()}
    return {**medians, "total": sum(medians.values())}


def row(turns: list[Turn], valid_json: int) -> dict[str, float]:
    ok = [t for t in turns if not t.error]
    decode = [(t.tokens - 1) / (t.total_s - t.ttft_s) for t in ok if t.tokens > 1 and t.total_s > t.ttft_s]
    return {
        "requests": len(ok),
        "errors": len(turns) - len(ok),
        "tokens": statistics.fmean(t.tokens for t in ok) if ok else float("nan"),
        "decode tok/s": statistics.median(decode) if decode else float("nan"),
        "TTFT ms": statistics.median(t.ttft_s for t in ok) * 1e3 if ok else float("nan"),
        "valid JSON": valid_json,
    }


def median_rows(results: list[ServerResult]) -> dict[tuple[str, str], dict[str, float]]:
    """Each (server, mode)'s figures, medians over the rounds."""
    return {(server, mode): medians([row(r.samples[mode], r.valid_json[mode]) for r in results if r.server == server])
            for server in dict.fromkeys(r.server for r in results) for mode in MODES}


def report(args: argparse.Namespace, cfg: BenchConfig, results: list[ServerResult], setup: dict[str, float],
           env: dict) -> str:
    rows = median_rows(results)
    cols = list(next(iter(rows.values())))
    lines = [
        "# llm-worker structured output benchmark", "",
        machine_line(cfg, env),
        f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads; one "
        f"stream at a time, {args.requests} requests per mode, greedy, up to {args.max_tokens} tokens; {args.rounds} "
        "rounds, every server started once a round, the order reversed every other round; medians over the rounds",
        "- plain: EOS banned, so max_tokens are generated; json_schema: a 30-property object (strings of at most "
        "16 characters, integers, booleans, an enum, numbers), all required; the grammar ends it", "",
        "| server | mode | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols),
    ]
    lines += [f"| {server} | {mode} | " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v)
                                                  for v in values.values()) + " |"
              for (server, mode), values in rows.items()]
    tok_s = {key: values["decode tok/s"] for key, values in rows.items()}
    checks = [("grammar setup, 30-property schema (convert + check + sampler)", f"{setup['total']:.2f} ms",
               setup["total"] < 50)]
    for worker in [label for label in dict.fromkeys(r.server for r in results) if label.startswith("llm-worker")]:
        ratio = tok_s[(worker, "json_schema")] / tok_s[(worker, "plain")]
        checks.append((f"{worker} json_schema / plain decode tok/s", f"{ratio:.2f}x", ratio >= 0.8))
        if (LLAMA_SERVER, "json_schema") in tok_s:
            ratio = tok_s[(worker, "json_schema")] / tok_s[(LLAMA_SERVER, "json_schema")]
            checks.append((f"{worker} / llama-server, json_schema decode tok/s", f"{ratio:.2f}x", ratio >= 1.0))
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {'yes' if met else 'NO'} |" for name, value, met in checks]
    lines += ["", "grammar setup steps (median ms): " + ", ".join(f"{k} {v:.2f}" for k, v in setup.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=1, ctx_size=4096, report="STRUCTURED.md")
    # exact drafts by prompt lookup by default, llama-server not: "exact no drafts" is the like-for-like row.
    p.add_argument("--variants", default="llm-worker exact,llm-worker exact no drafts,llm-worker fast,llama-server",
                   help="of: " + ", ".join(v[0] for v in VARIANTS))
    p.add_argument("--requests", type=int, default=6, help="requests per mode per server")
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3, help="every server started once a round")
    args = p.parse_args(argv)
    chosen = [v for v in VARIANTS if v[0] in args.variants.split(",")]
    model = find_model(args.model)
    cfg = BenchConfig(
        model=model, servers=(), prompt_lengths=(), concurrencies=(1,), requests_per_client=args.requests,
        level_timeout_s=0, max_tokens=args.max_tokens, parallel=args.parallel, ctx_size=args.ctx_size,
        threads=args.threads, temperature=0.0, seed=0,
        llama_server_bin=find_llama_server(args.llama_server) if any(v[1] == LLAMA_SERVER for v in chosen) else None,
        out_dir=args.out, publish=args.publish,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    no_eos = {str(t): -100.0 for t in PromptFactory(model).end_of_generation}
    env = {**environment(cfg), "rounds": args.rounds}
    setup = setup_ms(model)
    results = []
    for n, (label, server, extra) in alternated(chosen, args.rounds):
        print(f"== {label} (round {n + 1})", file=sys.stderr)
        with running_server(server, dataclasses.replace(cfg, worker_args=extra)) as (url, _proc, _sampler, _startup_s,
                                                                                        argv):
            results.append(ServerResult(label, n, argv))
            asyncio.run(drive(url, args, no_eos, results[-1]))
        for mode, turns in results[-1].samples.items():
            errors = [t.error for t in turns if t.error]
            print(f"   {mode}: {row(turns, results[-1].valid_json[mode])}"
                  + (f"; first error: {errors[0]}" if errors else ""), file=sys.stderr)
    text = report(args, cfg, results, setup, env)
    print(text)
    (args.out / "structured.md").write_text(text)
    (args.out / "structured.json").write_text(json.dumps(
        {"setup_ms": setup, "environment": env, "results": [asdict(r) for r in results]}, indent=2, default=str))
    if args.publish:
        publish(text, None, "STRUCTURED.md", "")
        figures: dict[str, dict[str, dict[str, float]]] = {}
        for (server, mode), values in median_rows(results).items():
            figures.setdefault(server, {})[mode] = {name: round(value, 1) for name, value in values.items()}
        write_summary("structured", env, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
