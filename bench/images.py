#!/usr/bin/env python3
"""Images: a one-image chat's time to first token, the same image in a later turn, and text streams beside
arriving images; llm-worker vs llama-server --mmproj on the same model and projector.

No vision model is within reach here, so the projector is the tests' colour projector (tests/vision_helpers.py),
built for the model with images resized to IMAGE_SIZE (384: 576 tokens an image, what a SigLIP-384 projector
makes) and, by default, SigLIP-base's 12 encoder blocks with random weights: the encoding costs what a real
tower's does, and the image's prefill is real. Each server answers ROUNDS first turns, each about an image
no cache holds (another shade each), then each conversation's second turn, which resends the image with the
answer and a follow-up; then STREAMS closed-loop greedy text completions stream while ROUNDS new images arrive
one after another, and their inter-token gaps meanwhile are reported. Targets: first-turn TTFT <= 1.0x
llama-server; a later turn's <= 0.3x the first's; the streams' ITL p99 <= 4x their p50.
Run: .venv/bin/python bench/run.py images [--publish]   (bench/IMAGES.md; docs/api.md, "Vision")
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.chat import Turn, chat_turn
from bench.client import RequestResult, new_session, stream_completion
from bench.config import LLAMA_SERVER, WORKER, BenchConfig, add_peer_flags, find_llama_server, find_model
from bench.report import environment, machine_line, write_report, write_summary
from bench.servers import running_server
from tests.vision_helpers import SIGLIP_BASE, build_projector, image_message, png

IMAGE_SIZE = 384
SYSTEM = "You are a careful assistant. Look at the picture and answer the question about it in a few words."
QUESTION, FOLLOW_UP = "Which colour is shown?", "Are you sure? Say it again in one word."
ANSWER_TOKENS = 8
ENCODERS = {"siglip-base": SIGLIP_BASE, "none": None}


def image(round_: int) -> bytes:
    """A picture of its own per round: the prefix caches of both servers key images by their pixels."""
    return png((255 - round_, 20, 20), IMAGE_SIZE, IMAGE_SIZE)


async def conversation(url: str, index: int) -> tuple[Turn, Turn]:
    """A first turn about picture `index` and the second turn that resends it."""
    messages = [{"role": "system", "content": SYSTEM}, *image_message(image(index), text=QUESTION)]
    first, second = Turn(index, 0), Turn(index, 1)
    async with new_session() as session:
        answer = await chat_turn(session, url, messages, ANSWER_TOKENS, {}, first)
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": FOLLOW_UP}]
        await chat_turn(session, url, messages, ANSWER_TOKENS, {}, second)
    for turn in (first, second):
        if turn.error or not turn.ttft_s:
            raise RuntimeError(turn.error or "no text answered")
    return first, second


async def beside_streams(url: str, args: argparse.Namespace) -> list[float]:
    """The text streams' gaps while `args.rounds` new images arrive one after another."""
    results: list[RequestResult] = []
    arriving = True

    async def stream(i: int) -> None:
        body = {"prompt": f"Tell a long story about a painter, part {i}.", "max_tokens": 64, "temperature": 0,
                "stream": True}
        while arriving:
            result = RequestResult(i, time.perf_counter())
            async with new_session() as session:
                await stream_completion(session, url, body, result)
            if result.error:
                raise RuntimeError(result.error)
            results.append(result)

    streams = [asyncio.ensure_future(stream(i)) for i in range(args.streams)]
    await asyncio.sleep(2.0)  # they are streaming
    begun = time.perf_counter()
    for n in range(args.rounds):
        await conversation(url, 50 + n)
    ended = time.perf_counter()
    arriving = False
    await asyncio.gather(*streams)
    return [b - a for r in results for a, b in zip(r.chunk_times, r.chunk_times[1:]) if begun <= a and b <= ended]


@dataclass(frozen=True)
class Measured:
    """One server's run: medians over its conversations, and the streams' gaps while images arrived."""

    first_ms: float
    second_ms: float
    prompt_tokens: int
    itl_p50_ms: float
    itl_p99_ms: float


def measure(url: str, args: argparse.Namespace) -> Measured:
    asyncio.run(conversation(url, 49))  # warm-up
    turns = [asyncio.run(conversation(url, n)) for n in range(args.rounds)]
    gaps = asyncio.run(beside_streams(url, args))
    return Measured(statistics.median(first.ttft_s for first, _ in turns) * 1e3,
                    statistics.median(second.ttft_s for _, second in turns) * 1e3, turns[0][0].prompt_tokens,
                    statistics.median(gaps) * 1e3, statistics.quantiles(gaps, n=100)[98] * 1e3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=4, ctx_size=8192, report="IMAGES.md")
    p.add_argument("--rounds", type=int, default=4, help="conversations (and arriving images) a run")
    p.add_argument("--streams", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3,
                   help="runs of every server, the order reversed every other one; the table gives medians")
    p.add_argument("--encoder", choices=ENCODERS, default="siglip-base",
                   help="the projector's vision tower: SigLIP-base's 12 blocks (random weights; encoding timed as "
                        "a real one's), or none (the colour projector alone)")
    args = p.parse_args(argv)
    model = find_model(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        projector = str(build_projector(model, Path(tmp) / "mmproj-colours.gguf", image_size=IMAGE_SIZE,
                                        encoder=ENCODERS[args.encoder]))
        cfg = BenchConfig(
            model=model, servers=(WORKER, LLAMA_SERVER), prompt_lengths=(), concurrencies=(), requests_per_client=1,
            level_timeout_s=0, max_tokens=ANSWER_TOKENS, parallel=args.parallel, ctx_size=args.ctx_size,
            threads=args.threads, temperature=0.0, seed=0, llama_server_bin=find_llama_server(args.llama_server),
            out_dir=args.out, publish=args.publish, worker_args=("--mmproj", projector),
            peer_args=("--mmproj", projector))
        env = {**environment(cfg), "rounds": args.repeats}
        runs: dict[str, list[Measured]] = {server: [] for server in cfg.servers}
        for n in range(args.repeats):
            for server in cfg.servers if n % 2 == 0 else cfg.servers[::-1]:
                with running_server(server, replace(cfg)) as (url, _proc, _sampler, _startup, _argv):
                    runs[server].append(measure(url, args))
    medians = {server: Measured(*(statistics.median(getattr(m, name) for m in measured)
                                  for name in Measured.__dataclass_fields__))
               for server, measured in runs.items()}
    tower = ("SigLIP-base's vision tower (12 blocks of 768, random weights)" if args.encoder == "siglip-base"
             else "no encoder layers")
    lines = ["# llm-worker images benchmark", "", machine_line(cfg, env),
             f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads, "
             f"`--mmproj` the tests' colour projector with {tower} at {IMAGE_SIZE}x{IMAGE_SIZE} "
             f"({(IMAGE_SIZE // 16) ** 2} tokens an image); {args.rounds} conversations, each a first turn about "
             f"a new image and a second that resends it, {ANSWER_TOKENS} greedy tokens a turn (after a warm-up "
             f"one); then {args.streams} text streams while {args.rounds} new images arrive",
             f"- {args.repeats} runs of every server, the order reversed every other run; medians", "",
             "| server | first turn TTFT ms (median) | second turn TTFT ms | second / first | prompt tokens | "
             "streams' ITL p50 ms | p99 ms | p99 / p50 |", "|---|---|---|---|---|---|---|---|"]
    for server, m in medians.items():
        lines.append(f"| {server} | {m.first_ms:.0f} | {m.second_ms:.0f} | {m.second_ms / m.first_ms:.2f}x | "
                     f"{m.prompt_tokens:.0f} | {m.itl_p50_ms:.1f} | {m.itl_p99_ms:.1f} | "
                     f"{m.itl_p99_ms / m.itl_p50_ms:.2f}x |")
    ours, theirs = medians[WORKER], medians[LLAMA_SERVER]
    each = ", ".join(f"{a.first_ms / b.first_ms:.2f}x" for a, b in zip(runs[WORKER], runs[LLAMA_SERVER]))
    lines += ["", f"first-turn TTFT, llm-worker / llama-server: {ours.first_ms / theirs.first_ms:.2f}x (each run: "
                  f"{each}; target <= 1.0x); llm-worker's second turn / first {ours.second_ms / ours.first_ms:.2f}x "
                  "(target <= 0.3x); the streams' ITL p99 / p50 is each row's last column (target <= 4x)"]
    if args.publish:
        write_summary("images", env, {server: {name: round(value, 1) for name, value in asdict(m).items()}
                                      for server, m in medians.items()})
    write_report("\n".join(lines) + "\n", args.out, "images.md", "IMAGES.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
