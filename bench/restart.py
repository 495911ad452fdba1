#!/usr/bin/env python3
"""Returning conversations after a restart: a replacement that starts warm from --kv-dir against a cold one.

A first worker (--kv-dir DIR) serves CONVERSATIONS conversations whose histories reach ~HISTORY tokens (a long
system prompt of their own, a question, a greedy answer), more conversations than slots, so that some are in host
memory and some in slots; SIGTERM makes it write them on drain. Then, one after the other, a worker without
--kv-dir (the cold restart) and one on the same DIR (the warm restart) start, and each answers every
conversation's next turn, one conversation at a time (users coming back one by one). Reports each worker's start
(spawn to /health 200) and the next turns' time to first token, against the targets: warm TTFT <= 0.2x cold's,
warm start within 2 s of cold's; the two must answer alike. Run: .venv/bin/python bench/run.py restart
[--conversations 8] [--history 1500] [--publish]   (bench/RESTART.md; docs/operations.md, "Warm restarts")
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.chat import Turn, chat_turn
from bench.client import new_session
from bench.config import WORKER, BenchConfig, add_worker_flags, worker_config
from bench.prompts import PromptFactory
from bench.report import environment, machine_line, write_report, write_summary
from bench.servers import running_server

QUESTION, NEXT_QUESTION = "Summarise the chronicle in one sentence.", "And what happened to the old water wheel?"


@dataclasses.dataclass
class Restart:
    label: str
    start_s: float
    turns: list[Turn]
    texts: list[str]
    kv_dir_s: float | None  # of the start, reading --kv-dir (its kv_dir_loaded log line); None: no --kv-dir

    @property
    def ttft_ms(self) -> list[float]:
        return [turn.ttft_s * 1e3 for turn in self.turns]


async def next_turns(url: str, histories: list[list[dict]], answer: int, no_eos: dict[str, float],
                     label: str) -> tuple[list[Turn], list[str]]:
    """Each conversation's next turn, one at a time; its Turn (TTFT, cached tokens) and its text."""
    turns, texts = [], []
    async with new_session() as session:
        for index, messages in enumerate(histories):
            turn = Turn(index, 2)
            texts.append(await chat_turn(session, url, [*messages, {"role": "user", "content": NEXT_QUESTION}],
                                         answer, no_eos, turn))
            if turn.error:
                raise RuntimeError(f"{label}: {turn.error}")
            turns.append(turn)
    return turns, texts


async def first_turns(url: str, systems: list[str], answer: int, no_eos: dict[str, float]) -> list[list[dict]]:
    """Every conversation's first turn, one after another (at once, those queued behind a full engine would wait
    minutes for a first byte on a busy machine): each history, answer included."""
    histories = []
    async with new_session() as session:
        for system in systems:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": QUESTION}]
            text = await chat_turn(session, url, messages, answer, no_eos, Turn(0, 1))
            histories.append([*messages, {"role": "assistant", "content": text}])
    return histories


def restart(label: str, cfg: BenchConfig, histories: list[list[dict]], answer: int,
            no_eos: dict[str, float]) -> Restart:
    print(f"== {label}", file=sys.stderr)
    with running_server(WORKER, cfg) as (url, _proc, _sampler, start_s, argv):
        print(f"   {' '.join(argv)}", file=sys.stderr)
        turns, texts = asyncio.run(next_turns(url, histories, answer, no_eos, label))
    lines = (cfg.out_dir / "logs" / f"{WORKER}.log").read_text().splitlines()
    loaded = [json.loads(line) for line in lines if '"kv_dir_loaded"' in line]
    return Restart(label, start_s, turns, texts, loaded[0]["seconds"] if loaded else None)


def report(cfg: BenchConfig, env: dict, args: argparse.Namespace, history: float, cold: Restart,
           warm: Restart) -> str:
    ratio = statistics.fmean(warm.ttft_ms) / statistics.fmean(cold.ttft_ms)
    lines = ["# llm-worker restart benchmark: --kv-dir", "", machine_line(cfg, env),
             f"- {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads; {args.conversations} "
             f"conversations of ~{history:.0f} history tokens, served by a first worker with --kv-dir and stopped "
             f"with SIGTERM; then each next turn ({args.answer} greedy tokens) one conversation at a time", "",
             "| restart | start s | of it, reading --kv-dir s | next-turn TTFT mean ms | p50 ms | max ms | "
             "cached tokens, mean |", "|---|---|---|---|---|---|---|"]
    for run in (cold, warm):
        cached = statistics.fmean(turn.cached_tokens or 0 for turn in run.turns)
        reading = "" if run.kv_dir_s is None else f"{run.kv_dir_s:.2f}"
        lines.append(f"| {run.label} | {run.start_s:.2f} | {reading} | {statistics.fmean(run.ttft_ms):.0f} | "
                     f"{statistics.median(run.ttft_ms):.0f} | {max(run.ttft_ms):.0f} | {cached:.0f} |")
    start_gap = warm.start_s - cold.start_s
    lines += ["", "| target | measured | met |", "|---|---|---|",
              f"| warm next-turn TTFT <= 0.2x cold's | {ratio:.3f}x | {'yes' if ratio <= 0.2 else 'no'} |",
              f"| warm start within 2 s of cold's | {start_gap:+.2f} s | {'yes' if start_gap <= 2 else 'no'} |",
              f"| same texts | {sum(a == b for a, b in zip(cold.texts, warm.texts))} of {len(cold.texts)} | "
              f"{'yes' if cold.texts == warm.texts else 'no'} |"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_worker_flags(p)
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--history", type=int, default=1500, help="tokens of each conversation's first turn, answered")
    p.add_argument("--answer", type=int, default=32, help="greedy tokens of each answer")
    p.add_argument("--publish", action="store_true", help="also write bench/RESTART.md")
    args = p.parse_args(argv)
    cfg = worker_config(args, args.answer)
    prompts = PromptFactory(cfg.model)
    no_eos = {str(t): -100.0 for t in prompts.end_of_generation}
    # The system prompt takes the history but the chat template's few tokens, the question and the answer.
    systems = [prompts.prompt(args.history - args.answer - 40) for _ in range(args.conversations)]
    env = environment(cfg)
    kv_dir = Path(tempfile.mkdtemp(prefix="llm-worker-restart-"))
    try:
        # --log-level info after the bench's warning: the warm worker's kv_dir_loaded line says what reading took.
        warm_flags = ("--kv-dir", str(kv_dir), "--kv-dir-interval", "0", "--log-level", "info")
        print("== first worker: the conversations' first turns, then SIGTERM", file=sys.stderr)
        with running_server(WORKER, dataclasses.replace(cfg, worker_args=warm_flags)) as (url, *_):
            histories = asyncio.run(first_turns(url, systems, args.answer, no_eos))
        cold = restart("cold (no --kv-dir)", cfg, histories, args.answer, no_eos)
        warm = restart("warm (--kv-dir)", dataclasses.replace(cfg, worker_args=warm_flags), histories, args.answer,
                       no_eos)
    finally:
        shutil.rmtree(kv_dir, ignore_errors=True)
    history = statistics.fmean(turn.prompt_tokens for turn in cold.turns)
    if args.publish:
        write_summary("restart", {**env, "rounds": 1}, {WORKER: {
            run.label: {"start_s": round(run.start_s, 2), "ttft_mean_ms": round(statistics.fmean(run.ttft_ms)),
                        "ttft_p50_ms": round(statistics.median(run.ttft_ms)), "ttft_max_ms": round(max(run.ttft_ms))}
            for run in (cold, warm)}})
    write_report(report(cfg, env, args, history, cold, warm), args.out, "restart.md",
                 "RESTART.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
