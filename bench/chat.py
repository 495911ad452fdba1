#!/usr/bin/env python3
"""Chat workloads users produce, side by side: llm-worker (each --prefix-cache mode) vs llama-server vs
llama_cpp.server.

multi-turn:  C conversations at once, T turns each; every turn resends the system prompt and the whole
             history (the server's own earlier answers), streamed; A generated tokens per answer.
             Reports time to first token per turn and the wall time of the whole run.
shared-system: one client, N requests one after another, each a long shared system prompt plus its own
             question; reports TTFT and decode tok/s per stream.

Every server loads the same GGUF with the same slots, context and threads, runs alone on the machine, and
gets the same work (a fixed amount, not a time window). EOS is banned by logit_bias so every answer has
exactly A tokens. --rounds R runs every server R times, in turn, the order reversed every other round (on a
shared machine one run's wall time moves by 30%): the table gives each column's median over the rounds, and the
ratios to llama-server are the medians of each round's ratio, with their range.
Run: .venv/bin/python bench/run.py chat [--rounds 3] [--publish]   (bench/CHAT.md, bench/chat.png;
docs/cache-and-exactness.md, "What exactness costs")
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import engine_time
from bench.client import new_session
from bench.config import (
    LLAMA_CPP_PY,
    LLAMA_SERVER,
    WORKER,
    BenchConfig,
    add_peer_flags,
    find_llama_server,
    find_model,
)
from bench.prompts import PromptFactory
from bench.report import environment, machine_line, publish, pyplot, ratio, save_chart, write_summary
from bench.rounds import alternated, medians, ratios_text
from bench.servers import running_server
from worker.engine.host import LIB_PATH_ENV, default_dir

SYSTEM = "You are a helpful assistant for a village history society. Answer kindly and in plain words."
QUESTIONS = [
    "Who built the old sea wall?", "Why was it built there?", "What happened in the great storm?",
    "How did the harbour change after the bridge opened?", "What do the fishermen say about it today?",
    "What should a visitor see first?", "Which boats are the oldest?", "Where did the ferry go?",
]
LONG_SYSTEM = (SYSTEM + " ") + ("Background: the harbour town keeps a chronicle of its boats, storms, mills and "
                                "schools, and visitors often ask about its sea wall, its ferry and its orchards. ") * 12
# Exact mode held to llama-cpp-python's own library (LLAMA_CPP_LIB_PATH), where the worker would load the
# batch-invariant build (worker/engine/exactness/build_choice.py): the fallback a plain pip install gets, pinned
# flash attention and no answers reused for F16/BF16/F32 weights; what the patched build buys.
DEFAULT_BUILD = "llm-worker exact on the default build"
# (label, server, extra llm-worker flags)
VARIANTS = [
    # The default: the batch-invariant build, flash attention on with f16 cells.
    ("llm-worker exact", WORKER, ("--prefix-cache", "exact")),
    (DEFAULT_BUILD, WORKER, ("--prefix-cache", "exact")),
    # Exact mode without flash attention (on the batch-invariant build, whose GEMM takes one row too).
    ("llm-worker exact unfused", WORKER, ("--prefix-cache", "exact", "--flash-attn", "off")),
    # The default without its prompt-lookup drafts (--spec-type auto drafts in exact mode on the cpu backend).
    ("llm-worker exact no drafts", WORKER, ("--prefix-cache", "exact", "--spec-type", "none")),
    ("llm-worker fast", WORKER, ("--prefix-cache", "fast")),
    ("llm-worker off", WORKER, ("--prefix-cache", "off")),
    ("llama-server", LLAMA_SERVER, ()),
    ("llama_cpp.server", LLAMA_CPP_PY, ()),
]


@dataclass
class Turn:
    conversation: int
    turn: int
    ttft_s: float = 0.0
    total_s: float = 0.0
    tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    error: str | None = None
    answer: str = ""


@dataclass
class VariantResult:
    label: str
    round: int = 0
    multi_turn: list[Turn] = field(default_factory=list)
    multi_turn_wall_s: float = 0.0
    multi_turn_engine: engine_time.EngineTime | None = None  # llm-worker's engine counters over the multi-turn run
    shared: list[Turn] = field(default_factory=list)


async def chat_turn(session: aiohttp.ClientSession, url: str, messages: list[dict], answer_tokens: int,
                    no_eos: dict[str, float], turn: Turn, extra: dict | None = None) -> str:
    """One greedy streamed answer; `extra`: more request fields (bench/structured.py's response_format)."""
    body = {"messages": messages, "max_tokens": answer_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "logit_bias": no_eos, **(extra or {})}
    sent, pieces = time.perf_counter(), []
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        if response.status != 200:
            turn.error = f"HTTP {response.status}: {(await response.text())[:200]}"
            return ""
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            event = json.loads(line[5:])
            for choice in event.get("choices") or []:
                if piece := (choice.get("delta") or {}).get("content"):
                    if not pieces:
                        turn.ttft_s = time.perf_counter() - sent
                    pieces.append(piece)
            if usage := event.get("usage"):
                turn.tokens, turn.prompt_tokens = usage["completion_tokens"], usage["prompt_tokens"]
                turn.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    turn.total_s = time.perf_counter() - sent
    turn.answer = "".join(pieces)
    return turn.answer


async def conversation(url: str, index: int, turns: int, answer_tokens: int, no_eos: dict[str, float]) -> list[Turn]:
    messages, out = [{"role": "system", "content": SYSTEM}], []
    async with new_session() as session:
        for t in range(turns):
            messages.append({"role": "user", "content": f"(Visitor {index}) {QUESTIONS[(index + t) % len(QUESTIONS)]}"})
            turn = Turn(index, t + 1)
            answer = await chat_turn(session, url, messages, answer_tokens, no_eos, turn)
            out.append(turn)
            messages.append({"role": "assistant", "content": answer})
    return out


async def multi_turn(url: str, args: argparse.Namespace, no_eos: dict[str, float], result: VariantResult) -> None:
    async with new_session() as session:
        before = await engine_time.read(session, url)
        began = time.perf_counter()
        runs = await asyncio.gather(*(conversation(url, c, args.turns, args.answer_tokens, no_eos)
                                      for c in range(args.conversations)))
        result.multi_turn_wall_s = time.perf_counter() - began
        after = await engine_time.read(session, url)
    if before and after:
        result.multi_turn_engine = engine_time.EngineTime.between(before, after, result.multi_turn_wall_s)
    result.multi_turn = [turn for run in runs for turn in run]


async def shared_system(url: str, args: argparse.Namespace, no_eos: dict[str, float], result: VariantResult) -> None:
    async with new_session() as session:
        for i in range(args.shared_requests):
            messages = [{"role": "system", "content": LONG_SYSTEM},
                        {"role": "user", "content": f"Question {i}: {QUESTIONS[i % len(QUESTIONS)]}"}]
            turn = Turn(0, i + 1)
            await chat_turn(session, url, messages, args.shared_tokens, no_eos, turn)
            result.shared.append(turn)


async def warm_up(url: str) -> None:
    async with new_session() as session:
        await chat_turn(session, url, [{"role": "user", "content": "Hello"}], 4, {}, Turn(-1, 0))


def bench_variant(label: str, server: str, cfg: BenchConfig, args: argparse.Namespace,
                  no_eos: dict[str, float], round_: int) -> VariantResult:
    print(f"== {label}" + (f" (round {round_ + 1})" if args.rounds > 1 else ""), file=sys.stderr)
    result = VariantResult(label, round_)
    with running_server(server, cfg) as (url, _proc, _sampler, _startup_s, argv):
        print(f"   {' '.join(argv)}", file=sys.stderr)
        asyncio.run(warm_up(url))
        asyncio.run(multi_turn(url, args, no_eos, result))
        asyncio.run(shared_system(url, args, no_eos, result))
    errors = [t.error for t in result.multi_turn + result.shared if t.error]
    if errors:
        print(f"   {len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    return result


def mean_ms(values: list[float]) -> float:
    return statistics.fmean(values) * 1e3 if values else float("nan")


def summary(result: VariantResult, late_from: int) -> dict[str, float]:
    ok = [t for t in result.multi_turn if not t.error]
    late = [t.ttft_s for t in ok if t.turn >= late_from]
    shared = [t for t in result.shared if not t.error]
    decode = [(t.tokens - 1) / (t.total_s - t.ttft_s) for t in shared if t.tokens > 1 and t.total_s > t.ttft_s]
    cached = [t.cached_tokens for t in ok if t.turn >= late_from and t.cached_tokens is not None]
    prompt = [t.prompt_tokens for t in ok if t.turn >= late_from]
    engine = result.multi_turn_engine  # llm-worker's counters over the multi-turn run (bench/engine_time.py)
    return {
        "late TTFT ms": mean_ms(late),
        "all-turn TTFT ms": mean_ms([t.ttft_s for t in ok]),
        "wall s": result.multi_turn_wall_s,
        "late prompt tokens": statistics.fmean(prompt) if prompt else float("nan"),
        "late cached tokens": statistics.fmean(cached) if cached else float("nan"),
        "shared TTFT ms": mean_ms([t.ttft_s for t in shared[1:]]),  # the first request fills the cache
        "shared decode tok/s": statistics.fmean(decode) if decode else float("nan"),
        "errors": float(sum(1 for t in result.multi_turn + result.shared if t.error)),
        "llama_decode % of wall": 100 * engine.decode_share if engine else float("nan"),
    }


RATIOS = ("late TTFT ms", "wall s", "shared decode tok/s", "shared TTFT ms")
# Greedy answers every llm-worker variant must give (exact mode's promise, drafts included): the first of these run.
REFERENCES = ("llm-worker off", "llm-worker exact no drafts")


def answers(result: VariantResult) -> dict[tuple[str, int, int], str]:
    """Each answer by (workload, conversation, turn)."""
    return ({("multi-turn", t.conversation, t.turn): t.answer for t in result.multi_turn}
            | {("shared", t.conversation, t.turn): t.answer for t in result.shared})


def same_answers(results: list[VariantResult]) -> list[str]:
    """For each llm-worker variant, how many of its answers (every round, both workloads) equal the reference's."""
    labels = list(dict.fromkeys(r.label for r in results))
    reference = next((label for label in REFERENCES if label in labels), None)
    if reference is None:
        return []
    want = answers(next(r for r in results if r.label == reference))
    lines = []
    for label in labels:
        if label.startswith("llm-worker") and label != reference:
            got = [(want.get(key), text) for r in results if r.label == label for key, text in answers(r).items()]
            lines.append(f"- {label}: {sum(a == b for a, b in got)} of {len(got)} answers equal {reference}'s")
    return ["", "Greedy answers against the reference (every round, both workloads):", "", *lines] if lines else []


def median_rows(results: list[VariantResult], late_from: int) -> dict[str, dict[str, float]]:
    """Each variant's figures, medians over the rounds."""
    labels = dict.fromkeys(r.label for r in results)
    return {label: medians([summary(r, late_from) for r in results if r.label == label]) for label in labels}


def each_rounds_ratio(args: argparse.Namespace, results: list[VariantResult]) -> dict[str, dict[str, list[float]]]:
    """Each llm-worker variant's ratio to llama-server in every round, per figure RATIOS names (none without it)."""
    by_round = {(r.label, r.round): summary(r, args.late_from) for r in results}
    labels = [label for label in dict.fromkeys(r.label for r in results) if label.startswith("llm-worker")]
    if not any(r.label == "llama-server" for r in results):
        return {}
    return {label: {key: [ratio(by_round[label, n][key], by_round["llama-server", n][key]) for n in range(args.rounds)]
                    for key in RATIOS} for label in labels}


def report(args: argparse.Namespace, cfg: BenchConfig, results: list[VariantResult], env: dict) -> str:
    rows = median_rows(results, args.late_from)
    cols = list(next(iter(rows.values())))
    lines = [
        "# llm-worker chat benchmark", "",
        machine_line(cfg, env),
        f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context in all, {cfg.threads} threads, "
        "its default prompt cache (llama_cpp.server: one slot of the same size)",
        f"- multi-turn: {args.conversations} conversations at once x {args.turns} turns, history resent, streamed, "
        f"{args.answer_tokens}-token greedy answers (EOS banned); late turns = turn {args.late_from} on",
        f"- shared system prompt: 1 client, {args.shared_requests} requests of a ~{len(LONG_SYSTEM) // 4}-token "
        f"system prompt + a question, {args.shared_tokens} tokens each",
        f"- {args.rounds} rounds, every server once a round, the order reversed every other round; "
        "medians over the rounds" if args.rounds > 1 else "- one round", "",
        "| server | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols),
    ]
    lines += [f"| {label} | " + " | ".join(f"{v:.1f}" for v in row.values()) + " |" for label, row in rows.items()]
    if ratios := each_rounds_ratio(args, results):
        lines += ["", "llm-worker / llama-server (for TTFT and wall time lower is better, for tok/s higher"
                  + ("; each round's ratio, their median and range" if args.rounds > 1 else "") + "):", "",
                  "| llm-worker mode | late TTFT | wall time | shared-prompt decode tok/s | shared-prompt TTFT |",
                  "|---|---|---|---|---|"]
        lines += [f"| {label.removeprefix('llm-worker ')} | " + " | ".join(ratios_text(each[k]) for k in RATIOS) + " |"
                  for label, each in ratios.items()]
    lines += same_answers(results)
    return "\n".join(lines) + "\n"


def draw_chart(args: argparse.Namespace, results: list[VariantResult], path: Path) -> bool:
    """Mean time to first token per turn, one line per server (matplotlib is optional)."""
    if (plt := pyplot()) is None:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    turns = range(1, args.turns + 1)
    for label in dict.fromkeys(r.label for r in results):  # every round's turns together
        ok = [t for r in results if r.label == label for t in r.multi_turn if not t.error]
        per_turn = [mean_ms([t.ttft_s for t in ok if t.turn == n]) for n in turns]
        ax.plot(list(turns), per_turn, marker="o", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("turn (history resent each turn)")
    ax.set_ylabel("mean time to first token (ms)")
    ax.set_title(f"{args.conversations} conversations at once, {args.answer_tokens}-token answers")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return save_chart(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=4, ctx_size=8192, report="CHAT.md (--report names another)")
    p.add_argument("--report", default="CHAT.md", help="the bench/ file --publish writes (CHAT-HYBRID.md for a "
                                                        "hybrid model: bench/hybrid_model.py)")
    p.add_argument("--variants", default=",".join(v[0] for v in VARIANTS))
    p.add_argument("--conversations", type=int, default=4)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--late-from", type=int, default=4)
    p.add_argument("--answer-tokens", type=int, default=48)
    p.add_argument("--shared-requests", type=int, default=6)
    p.add_argument("--shared-tokens", type=int, default=96)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args(argv)
    chosen = [v for v in VARIANTS if v[0] in args.variants.split(",")]
    model = find_model(args.model)
    cfg = BenchConfig(
        model=model, servers=(), prompt_lengths=(), concurrencies=(), requests_per_client=1, level_timeout_s=0,
        max_tokens=args.answer_tokens, parallel=args.parallel, ctx_size=args.ctx_size, threads=args.threads,
        temperature=0.0, seed=0,
        llama_server_bin=find_llama_server(args.llama_server) if any(v[1] == LLAMA_SERVER for v in chosen) else None,
        out_dir=args.out, publish=args.publish, cache_ram=True,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    prompts = PromptFactory(model)
    no_eos = {str(t): -100.0 for t in prompts.end_of_generation}
    env = {**environment(cfg), "rounds": args.rounds}
    results = [bench_variant(label, server, dataclasses.replace(cfg, worker_args=extra, worker_env=(
        ((LIB_PATH_ENV, str(default_dir())),) if label == DEFAULT_BUILD else ())), args, no_eos, n)
               for n, (label, server, extra) in alternated(chosen, args.rounds)]
    text = report(args, cfg, results, env)
    print(text)
    (args.out / "chat.md").write_text(text)
    (args.out / "chat.json").write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=2))
    chart = args.out / f"{Path(args.report).stem.lower()}.png"  # chat.png beside CHAT.md
    has_chart = draw_chart(args, results, chart)
    if args.publish:
        publish(text, chart if has_chart else None, args.report, "time to first token per turn")
        figures = {label: {name: round(value, 1) for name, value in row.items()}
                   for label, row in median_rows(results, args.late_from).items()}
        each_round = {label: {key: [round(value, 4) for value in values] for key, values in each.items()}
                      for label, each in each_rounds_ratio(args, results).items()}
        write_summary(Path(args.report).stem.lower(), env, figures, each_round)
    return 0


if __name__ == "__main__":
    sys.exit(main())
