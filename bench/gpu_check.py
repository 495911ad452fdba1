#!/usr/bin/env python3
"""GPU check: the worker on a GPU backend, what exact mode keeps there, and a short side-by-side with llama-server.

Serves the model with `serve --backend BACKEND` (every layer offloaded) and checks, each step under a timeout and
going on after a failure: `backends` lists the device; the load offloads every layer; /health's vram_bytes and the
load-time exactness check; a streamed chat; greedy text alone, beside 3 other requests, again from the prompt cache
and on a `--prefix-cache off` worker (prompts longer than one prefill chunk); a 2-turn chat, cache on and off. Then
decode tok/s at 1 and 8 streams and the time of a long prefill, for exact mode, fast mode and llama-server's build
of the same llama.cpp (`-ngl 999`). Prints one table; writes gpu-check.md, gpu-check.json, the speeds as a summary
(summary/gpu-check.json, the format of bench/results/summaries/) and the servers' logs under --out.

scripts/gpu-check runs it on a lent GPU machine from a bundle (docs/backends.md, "Checking a GPU"); here it runs
on Vulkan's lavapipe with --quick (tests/e2e/test_gpu_backends.py).
Run: python3 bench/gpu_check.py --backend cuda --llama-server BIN [--model GGUF] [--out DIR] [--quick]
     (LLAMA_CPP_LIB_PATH: the libllama directory of the backend's build, as for the worker)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.config import LLAMA_SERVER, MB, WORKER, BenchConfig, find_model
from bench.prompts import PromptFactory
from bench.report import environment, write_summary
from bench.servers import running_server
from bench.throughput import run_level

CHAT = [{"role": "user", "content": "Name three rivers of Europe and one fact about each."}]


@dataclass
class Step:
    name: str
    ok: bool | None  # None: reported, nothing to pass or fail
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Perf:
    server: str
    decode_1: float | None = None  # tok/s of one stream, first to last token
    decode_8: float | None = None  # tok/s of 8 streams together
    prefill_ms: float | None = None  # time to the first token of a long prompt, median
    error: str | None = None


class Check:
    """Runs the steps, each under a timeout; a step that raises or times out is a failed row, and the rest go on."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.steps: list[Step] = []

    def run(self, name: str, fn: Callable[[], Step | None]) -> Step | None:
        began = time.perf_counter()
        try:
            step = fn()
        except Exception as exc:  # every failure becomes a row, and the check goes on
            step = Step(name, False, f"{type(exc).__name__}: {str(exc)[-300:]}")
        if step is not None:
            step.name = name
            self.steps.append(step)
            mark = {True: "ok", False: "FAIL", None: "--"}[step.ok]
            print(f"[{mark:>4}] {name}: {step.detail} ({time.perf_counter() - began:.1f}s)", file=sys.stderr,
                  flush=True)
        return step

    def sync(self, coro: Any) -> Any:
        return asyncio.run(asyncio.wait_for(coro, self.timeout))


async def completion(session: aiohttp.ClientSession, url: str, prompt: str, tokens: int) -> tuple[str, int]:
    """A greedy completion's text and how many of its prompt tokens came from the cache."""
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0}
    async with session.post(url + "/v1/completions", json=body) as response:
        result = await response.json()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {str(result)[:200]}")
    cached = ((result.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return result["choices"][0]["text"], cached


async def chat(session: aiohttp.ClientSession, url: str, messages: list[dict[str, str]],
               tokens: int) -> tuple[str, float, str]:
    """A streamed greedy chat turn: its text, the time to its first piece, and its finish reason."""
    body = {"messages": messages, "max_tokens": tokens, "temperature": 0, "stream": True}
    sent, first, pieces, finish = time.perf_counter(), None, [], ""
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:200]}")
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = (json.loads(line[6:]).get("choices") or [{}])[0]
            if piece := (choice.get("delta") or {}).get("content"):
                first = first or time.perf_counter()
                pieces.append(piece)
            finish = choice.get("finish_reason") or finish
    return "".join(pieces), ((first or sent) - sent) * 1000, finish


async def two_turns(session: aiohttp.ClientSession, url: str, tokens: int, document: str) -> list[str]:
    """Two conversations of two turns each: a short one, and one under a long system prompt (`document`), whose
    second turn reuses more than a prefill chunk's cells."""
    texts = []
    for opening in (CHAT, [{"role": "system", "content": document}, *CHAT]):
        first, _, _ = await chat(session, url, opening, tokens)
        second, _, _ = await chat(session, url, [*opening, {"role": "assistant", "content": first},
                                                 {"role": "user", "content": "Which of them is the longest?"}], tokens)
        texts += [first, second]
    return texts


async def health(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url + "/health") as response:
        return await response.json()


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))


def backends_step(args: argparse.Namespace) -> Step:
    out = subprocess.run([sys.executable, "-m", "worker", "backends", "--json"], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parent.parent)
    if out.returncode != 0:
        return Step("", False, f"exit {out.returncode}: {out.stderr.strip()[-300:]}")
    info = json.loads(out.stdout)
    devices = [d for d in info["devices"] if d["backend"] == args.backend]
    listed = "; ".join(f"{d['name']} ({d['description']}), {d['memory_free'] / 2**30:.1f} of "
                       f"{d['memory_total'] / 2**30:.1f} GiB free" for d in devices)
    return Step("", bool(devices) and args.backend in info["servable"],
                listed or f"no {args.backend} device; backends: {', '.join(info['backends'])}", info)


def offload_step(log: str, startup_s: float, backend: str) -> Step:
    found = re.search(r"offloaded (\d+)/(\d+) layers to GPU", log)
    if backend == "cpu":
        return Step("", None, f"healthy after {startup_s:.1f}s (cpu: nothing to offload)")
    if not found:
        return Step("", False, f"healthy after {startup_s:.1f}s, but no 'offloaded N/N layers' line in the log")
    return Step("", found[1] == found[2], f"{found[0]}, healthy after {startup_s:.1f}s")


def exact_worker(check: Check, cfg: BenchConfig, args: argparse.Namespace, prompts: list[str],
                 texts: dict[str, Any], perf: list[Perf], factory: PromptFactory) -> None:
    """The worker as users start it (exact mode): the device, the exactness check, the texts, then its speed."""
    with running_server(WORKER, cfg) as (url, _proc, _sampler, startup_s, _argv):
        log = (cfg.out_dir / "logs" / f"{WORKER}.log").read_text(errors="replace")
        check.run("serve: every layer offloaded", lambda: offload_step(log, startup_s, args.backend))
        status = check.sync(_with_session(lambda s: health(s, url)))
        exactness, vram = status.get("exactness", {}), status.get("vram_bytes", 0)
        model_mib = cfg.model.stat().st_size / MB
        check.run("vram_bytes", lambda: Step(
            "", vram > model_mib * MB if args.backend != "cpu" else vram == 0,
            f"{vram / MB:.0f} MiB on the device (model file {model_mib:.0f} MiB)", {"vram_bytes": vram}))
        guarantee = next((json.loads(line) for line in log.splitlines() if '"exactness_guarantee"' in line), {})
        check.run("load-time check", lambda: Step(
            "", None, f"decoded_cells_exact={exactness.get('decoded_cells_exact')} "
                      f"batch_invariant={exactness.get('batch_invariant')} "
                      f"answers_reused={exactness.get('answers_reused')} flash_attn={exactness.get('flash_attn')} "
                      f"guarantee={guarantee.get('guarantee')}", {"exactness": exactness, "guarantee": guarantee}))
        n = args.answer_tokens
        check.run("streamed chat", lambda: _chat_step(check, url, n))

        async def alone_then_together(s: aiohttp.ClientSession) -> None:
            texts["alone"] = [(await completion(s, url, p, n))[0] for p in prompts]
            texts["together"] = [t for t, _ in await asyncio.gather(*(completion(s, url, p, n) for p in prompts))]
            cached = [await completion(s, url, p, n) for p in prompts]
            texts["cached"], texts["cached_tokens"] = [t for t, _ in cached], [c for _, c in cached]
            texts["chat"] = await two_turns(s, url, n, prompts[0])

        # A failure here is a row; the speed is still measured.
        check.run("greedy texts", lambda: check.sync(_with_session(alone_then_together)))
        check.run(f"greedy: alone = beside {len(prompts) - 1} others",
                  lambda: _same(texts.get("alone"), texts.get("together", [])))
        check.run("greedy: from the prompt cache = cold", lambda: _same(
            texts.get("alone"), texts.get("cached", []), f"cached tokens {texts.get('cached_tokens')}"))
        perf.append(measure_speed(check, "llm-worker exact", url, cfg, args, factory))


def off_worker(check: Check, cfg: BenchConfig, args: argparse.Namespace, prompts: list[str],
               texts: dict[str, Any]) -> None:
    off = dataclasses.replace(cfg, worker_args=(*cfg.worker_args, "--prefix-cache", "off"),
                              out_dir=cfg.out_dir / "off")
    with running_server(WORKER, off) as (url, *_):
        async def both(s: aiohttp.ClientSession) -> tuple[list[str], list[str]]:
            n = args.answer_tokens
            return [(await completion(s, url, p, n))[0] for p in prompts], await two_turns(s, url, n, prompts[0])

        greedy, turns = check.sync(_with_session(both))
    check.run("greedy: exact = --prefix-cache off", lambda: _same(texts.get("alone"), greedy))
    check.run("2-turn chats: exact = --prefix-cache off", lambda: _same(texts.get("chat"), turns))


def measure_speed(check: Check, label: str, url: str, cfg: BenchConfig, args: argparse.Namespace,
                  factory: PromptFactory) -> Perf:
    """Decode tok/s of 1 stream and of 8, and a long prompt's time to first token (no prompt shares a prefix)."""
    perf = Perf(label)
    decode = dataclasses.replace(cfg, max_tokens=args.decode_tokens, requests_per_client=args.requests)
    prefill = dataclasses.replace(cfg, max_tokens=1, requests_per_client=args.requests)
    try:
        one = check.sync(run_level(url, decode, factory, 128, 1, _NoRss(), label))
        eight = check.sync(run_level(url, decode, factory, 128, 8, _NoRss(), label))
        long = check.sync(run_level(url, prefill, factory, args.prefill_tokens, 1, _NoRss(), label))
        perf.decode_1, perf.decode_8, perf.prefill_ms = one.decode_tok_s_p50, eight.agg_tok_s, long.ttft_p50_ms
        if one.errors or eight.errors or long.errors:
            perf.error = f"{one.errors + eight.errors + long.errors} requests failed"
    except Exception as exc:  # a failed measurement is a row; the other servers still run
        perf.error = f"{type(exc).__name__}: {str(exc)[-200:]}"
    print(f"[perf] {perf}", file=sys.stderr, flush=True)
    return perf


def peer_speed(check: Check, name: str, label: str, cfg: BenchConfig, args: argparse.Namespace,
               factory: PromptFactory) -> Perf:
    try:
        with running_server(name, cfg) as (url, *_):
            return measure_speed(check, label, url, cfg, args, factory)
    except Exception as exc:  # a server that does not start is a row too
        return Perf(label, error=f"{type(exc).__name__}: {str(exc)[-300:]}")


class _NoRss:
    """run_level reads peak RSS from a sampler; on a GPU the device memory is what matters (vram_bytes)."""

    def peak(self, *_: float) -> int:
        return 0


async def _with_session(fn: Callable[[aiohttp.ClientSession], Any]) -> Any:
    async with session() as s:
        return await fn(s)


def _chat_step(check: Check, url: str, tokens: int) -> Step:
    text, ttft_ms, finish = check.sync(_with_session(lambda s: chat(s, url, CHAT, tokens)))
    return Step("", bool(text.strip()) and finish in ("stop", "length"),
                f"{ttft_ms:.0f} ms to the first piece, finish {finish}: {text[:60]!r}")


def _same(expected: list[str] | None, got: list[str], note: str = "") -> Step:
    if expected is None:
        return Step("", False, "no reference texts (an earlier step failed)")
    differ = [i for i, (a, b) in enumerate(zip(expected, got)) if a != b]
    detail = f"{len(expected) - len(differ)} of {len(expected)} identical" + (f"; {note}" if note else "")
    if differ:
        detail += f"; first difference in #{differ[0]}: {expected[differ[0]][:40]!r} vs {got[differ[0]][:40]!r}"
    return Step("", not differ and len(expected) == len(got), detail)


def report(args: argparse.Namespace, steps: list[Step], perf: list[Perf]) -> str:
    lines = [f"GPU check: --backend {args.backend}, {args.model_path.name}, {time.strftime('%Y-%m-%d %H:%M')}", "",
             "| check | result | detail |", "|---|---|---|"]
    lines += [f"| {s.name} | {({True: 'ok', False: 'FAIL', None: '-'})[s.ok]} | {s.detail} |" for s in steps]
    lines += ["", f"| server | decode tok/s, 1 stream | decode tok/s, 8 streams | {args.prefill_tokens}-token prefill, "
                  "ms to first token | note |", "|---|---|---|---|---|"]
    for p in perf:
        prefill = f"{p.prefill_ms:.0f} ({args.prefill_tokens / p.prefill_ms * 1000:.0f} tok/s)" if p.prefill_ms else "-"
        lines.append(f"| {p.server} | {_num(p.decode_1)} | {_num(p.decode_8)} | {prefill} | {p.error or ''} |")
    return "\n".join(lines)


def loan_environment(cfg: BenchConfig, args: argparse.Namespace, steps: list[Step]) -> dict[str, Any]:
    """The run's environment for its summary, the machine named by its devices (what docs/backends.md's per-loan
    table lists): one run of each server, the commit from BENCH_COMMIT where the tree came without its history."""
    devices = [d["description"] for step in steps[:1] for d in step.data.get("devices", [])
               if d["backend"] == args.backend]
    env = environment(cfg) | {"rounds": 1}
    if devices:
        env["cpu"] = f"{', '.join(devices)} ({args.backend}) on {env['cpu']}"
    return env


def summary_figures(perf: list[Perf]) -> dict[str, dict[str, float | None]]:
    """Each server's speeds, as docs/backends.md's per-loan table quotes them; a server whose run failed is left out."""
    return {p.server: {"decode_1_tok_s": p.decode_1, "decode_8_tok_s": p.decode_8, "prefill_ms": p.prefill_ms}
            for p in perf if not p.error}


def _num(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.1f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="cuda")
    p.add_argument("--model", help="GGUF file (default: the worker's default model)")
    p.add_argument("--llama-server", type=Path, help="llama-server of the same build (left out when not given)")
    p.add_argument("--out", type=Path, default=Path("gpu-check-out"))
    p.add_argument("--quick", action="store_true",
                   help="small numbers for a slow device (a CPU rehearsal; lavapipe, which decodes ~1 token a second)")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--step-timeout", type=float, default=240.0, help="seconds one step may take")
    a = p.parse_args(argv)
    a.model_path = find_model(a.model)
    # Greedy answers long enough to drift if a row's numerics moved; prompts longer than one prefill chunk.
    a.prompt_tokens, a.answer_tokens, a.decode_tokens, a.prefill_tokens, a.requests, a.slot_ctx = (
        (300, 8, 8, 256, 1, 2048) if a.quick else (700, 48, 256, 4000, 3, 5120))
    return a


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # unwind: stop the servers
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.step_timeout)
    parallel = 8
    cfg = BenchConfig(
        model=args.model_path, servers=(WORKER,), prompt_lengths=(), concurrencies=(), requests_per_client=1,
        level_timeout_s=args.step_timeout, max_tokens=args.answer_tokens, parallel=parallel,
        ctx_size=parallel * args.slot_ctx, threads=args.threads, temperature=0.0, seed=1234,
        llama_server_bin=args.llama_server, out_dir=args.out.resolve(), publish=False,
        worker_args=("--backend", args.backend, "--log-level", "debug"), peer_args=("-ngl", "999"))
    factory = PromptFactory(args.model_path)
    prompts = [factory.prompt(args.prompt_tokens) for _ in range(4)]
    texts: dict[str, Any] = {}
    perf: list[Perf] = []
    check.run("backends lists the device", lambda: backends_step(args))
    check.run("exact worker", lambda: exact_worker(check, cfg, args, prompts, texts, perf, factory))
    check.run("off worker", lambda: off_worker(check, cfg, args, prompts, texts))
    fast = dataclasses.replace(cfg, worker_args=(*cfg.worker_args, "--prefix-cache", "fast"),
                               out_dir=cfg.out_dir / "fast")
    perf.append(peer_speed(check, WORKER, "llm-worker fast", fast, args, factory))
    if args.llama_server:
        perf.append(peer_speed(check, LLAMA_SERVER, "llama-server", cfg, args, factory))
    table = report(args, check.steps, perf)
    print(table)
    (args.out / "gpu-check.md").write_text(table + "\n")
    (args.out / "gpu-check.json").write_text(json.dumps(
        {"backend": args.backend, "model": str(args.model_path), "steps": [dataclasses.asdict(s) for s in check.steps],
         "perf": [dataclasses.asdict(p) for p in perf], "texts": texts}, indent=2, default=str) + "\n")
    write_summary("gpu-check", loan_environment(cfg, args, check.steps), summary_figures(perf),
                  directory=args.out / "summary")
    with contextlib.suppress(OSError):
        subprocess.run(["tar", "-czf", str(args.out / "logs.tar.gz"), "-C", str(args.out.resolve()),
                        *[str(p.relative_to(args.out.resolve())) for p in args.out.resolve().rglob("*.log")]],
                       check=False, timeout=60)
    return 0 if all(s.ok is not False for s in check.steps) and not any(p.error for p in perf) else 1


if __name__ == "__main__":
    sys.exit(main())
