#!/usr/bin/env python3
"""Speculative decoding: decode tok/s with and without drafts, llm-worker vs llama-server's n-gram drafts.

Two prompt sets, each answered greedily (EOS allowed; up to --max-tokens): copying (code edits whose answer
repeats most of the code in the prompt: this repository's own sources) and open-ended (stories, explanations).
Each set runs at 1 stream (its prompts one after another) and at 4 streams (its prompts at once), once a round;
--rounds R starts every server R times, in turn, the order reversed every other round, and the figures are medians
over the rounds. Per server and workload: generated tokens / the time from each request's first token to its end (one
stream), or all tokens / the wall time of the set (four streams). llm-worker runs with --spec-type none and
ngram; llama-server with none and its n-gram types. Every server loads the same GGUF, alone on the machine, with
the same slots, context and threads. The texts of llm-worker with and without drafts are compared: in exact mode
they must be equal. Run: .venv/bin/python bench/run.py speculative [--publish]   (bench/SPECULATIVE.md)

Targets (issue 24): copying, one stream: ngram >= 1.5x llm-worker without drafts and >= 1.0x llama-server with
its best n-gram type; open-ended: >= 0.97x without drafts; 4 streams: >= 1.0x without drafts.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.chat import Turn, chat_turn, warm_up
from bench.client import new_session
from bench.config import (
    LLAMA_SERVER,
    REPO_DIR,
    WORKER,
    BenchConfig,
    add_peer_flags,
    find_llama_server,
    find_model,
)
from bench.report import environment, machine_line, publish, write_summary
from bench.rounds import alternated, medians
from bench.servers import running_server

# (label, server, extra flags)
VARIANTS = [
    ("llm-worker none", WORKER, ("--spec-type", "none")),
    ("llm-worker ngram", WORKER, ("--spec-type", "ngram")),
    ("llama-server none", LLAMA_SERVER, ()),
    ("llama-server ngram-simple", LLAMA_SERVER, ("--spec-type", "ngram-simple")),
    ("llama-server ngram-map-k", LLAMA_SERVER, ("--spec-type", "ngram-map-k")),
]
SOURCES = ("worker/engine/speculative/prompt_lookup.py", "worker/engine/output/seeded_draw.py",
           "worker/engine/handle.py", "worker/timefmt.py")
TASKS = ("Rewrite this Python code with every variable named `data` renamed to `buffer`. Output only the code.",
         "Remove all comments from this Python code. Output only the code.",
         "Add a docstring to each function of this Python code. Output the whole code.",
         "Quote the following code exactly:")
OPEN_ENDED = ("Write a short story about a lighthouse keeper.", "Explain how a hash map works.",
              "Write an email to a colleague asking to move our meeting to Friday.",
              "List ten fruits and one fact about each.")
SNIPPET_CHARS = 1400
STREAMS = (1, 4)


def code_snippet(path: str) -> str:
    """The code after a module's docstring: what the copying prompts ask to edit."""
    text = (REPO_DIR / path).read_text()
    start = text.index("\n\n", text.index('"""', 3)) + 2
    return text[start:start + SNIPPET_CHARS]


def prompt_sets() -> dict[str, list[str]]:
    return {"copying": [f"{task}\n\n{code_snippet(path)}" for task, path in zip(TASKS, SOURCES)],
            "open-ended": list(OPEN_ENDED)}


@dataclass
class Run:
    tokens: int = 0
    seconds: float = 0.0  # decode time (1 stream) or wall time (4 streams)
    texts: list[str] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")


async def answer(session, url: str, prompt: str, max_tokens: int) -> tuple[Turn, str]:
    turn = Turn(0, 0)
    text = await chat_turn(session, url, [{"role": "user", "content": prompt}], max_tokens, {}, turn)
    if turn.error:
        raise RuntimeError(turn.error)
    return turn, text


async def drive(url: str, args: argparse.Namespace) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    async with new_session() as session:
        for name, prompts in prompt_sets().items():
            for streams in STREAMS:
                run = runs[f"{name}, {streams} stream{'s' * (streams > 1)}"] = Run()
                if streams == 1:
                    for prompt in prompts:
                        turn, text = await answer(session, url, prompt, args.max_tokens)
                        run.tokens += turn.tokens - 1
                        run.seconds += turn.total_s - turn.ttft_s
                        run.texts.append(text)
                else:
                    began = time.perf_counter()
                    done = await asyncio.gather(*(answer(session, url, p, args.max_tokens) for p in prompts))
                    run.seconds += time.perf_counter() - began
                    run.tokens += sum(turn.tokens for turn, _ in done)
                    run.texts += [text for _, text in done]
    return runs


def median_tok_s(results: dict[str, list[dict[str, Run]]]) -> dict[str, dict[str, float]]:
    """Each server's tok/s per workload, medians over the rounds."""
    return {label: medians([{w: run.tok_s for w, run in runs.items()} for runs in rounds])
            for label, rounds in results.items()}


def report(args: argparse.Namespace, cfg: BenchConfig, results: dict[str, list[dict[str, Run]]], env: dict) -> str:
    workloads = list(next(iter(results.values()))[0])
    tok_s = median_tok_s(results)
    lines = ["# llm-worker speculative decoding benchmark", "", machine_line(cfg, env),
             f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads; greedy, "
             f"up to {args.max_tokens} tokens an answer; {args.rounds} rounds, every server started once a round, the "
             "order reversed every other round, medians over the rounds; tok/s: decode (1 stream) or "
             "all tokens over the wall time (4 streams)", "",
             "| server | " + " | ".join(workloads) + " |", "|---|" + "---|" * len(workloads)]
    for label, row in tok_s.items():
        lines.append(f"| {label} | " + " | ".join(f"{row[w]:.1f}" for w in workloads) + " |")
    checks = []
    if "llm-worker none" in tok_s and "llm-worker ngram" in tok_s:
        ours, base = tok_s["llm-worker ngram"], tok_s["llm-worker none"]
        for w, target in (("copying, 1 stream", 1.5), ("open-ended, 1 stream", 0.97), ("copying, 4 streams", 1.0),
                          ("open-ended, 4 streams", 1.0)):
            checks.append((f"ngram / none, {w}", ours[w] / base[w], target))
        peers = [label for label in tok_s if label.startswith("llama-server") and label != "llama-server none"]
        if peers:
            best = max(peers, key=lambda label: tok_s[label]["copying, 1 stream"])
            checks.append((f"ngram / {best} (its best), copying, 1 stream",
                           ours["copying, 1 stream"] / tok_s[best]["copying, 1 stream"], 1.0))
        pairs = [(a, b) for without, with_ in zip(results["llm-worker none"], results["llm-worker ngram"])
                 for w in workloads for a, b in zip(without[w].texts, with_[w].texts)]
        same, total = sum(a == b for a, b in pairs), len(pairs)
        lines += ["", f"llm-worker texts with drafts equal to without: {same} of {total}"]
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} >= {target}x | {value:.2f}x | {'yes' if value >= target else 'NO'} |"
              for name, value, target in checks]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=4, ctx_size=8192, report="SPECULATIVE.md")
    p.add_argument("--variants", default=",".join(v[0] for v in VARIANTS),
                   help="of: " + ", ".join(v[0] for v in VARIANTS))
    p.add_argument("--rounds", type=int, default=3, help="every server started once a round")
    p.add_argument("--max-tokens", type=int, default=200)
    args = p.parse_args(argv)
    chosen = [v for v in VARIANTS if v[0] in args.variants.split(",")]
    model = find_model(args.model)
    cfg = BenchConfig(
        model=model, servers=(), prompt_lengths=(), concurrencies=STREAMS, requests_per_client=args.rounds,
        level_timeout_s=0, max_tokens=args.max_tokens, parallel=args.parallel, ctx_size=args.ctx_size,
        threads=args.threads, temperature=0.0, seed=0,
        llama_server_bin=find_llama_server(args.llama_server) if any(v[1] == LLAMA_SERVER for v in chosen) else None,
        out_dir=args.out, publish=args.publish,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**environment(cfg), "rounds": args.rounds}
    results: dict[str, list[dict[str, Run]]] = {label: [] for label, _, _ in chosen}
    for n, (label, server, extra) in alternated(chosen, args.rounds):
        print(f"== {label} (round {n + 1})", file=sys.stderr)
        flags = {"worker_args": extra} if server == WORKER else {"peer_args": extra}
        with running_server(server, dataclasses.replace(cfg, **flags)) as (url, _proc, _sampler, _startup_s, argv):
            asyncio.run(warm_up(url))
            results[label].append(asyncio.run(drive(url, args)))
        print("   " + ", ".join(f"{w}: {r.tok_s:.1f}" for w, r in results[label][-1].items()), file=sys.stderr)
    text = report(args, cfg, results, env)
    print(text)
    (args.out / "speculative.md").write_text(text)
    (args.out / "speculative.json").write_text(json.dumps(
        {"environment": env, "results": {label: [{w: dataclasses.asdict(r) for w, r in runs.items()} for runs in rounds]
                                         for label, rounds in results.items()}}, indent=2, default=str))
    if args.publish:
        publish(text, None, "SPECULATIVE.md", "")
        write_summary("speculative", env, {label: {w: round(value, 1) for w, value in row.items()}
                                           for label, row in median_tok_s(results).items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
