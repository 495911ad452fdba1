#!/usr/bin/env python3
"""Closed-loop benchmark: llm-worker against llama.cpp's llama-server and llama_cpp.server.

All three servers load the same GGUF on the same machine, one after the other, with the
same slot count, total context and thread count, and are driven by the same workload:
C clients (C in 1, 4, 8, 16) each streaming POST /v1/completions back to back, with
128- and 512-token prompts and 128 generated tokens. See bench/README.md.
Run: .venv/bin/python bench/run.py throughput [--quick] [--publish]   (bench/RESULTS.md, bench/chart.png)

Needs only the standard library, aiohttp and llama-cpp-python (all in the worker's venv);
matplotlib is optional and only draws the chart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import engine_time
from bench.client import RequestResult, new_session, request_body, stream_completion
from bench.config import (
    BENCH_DIR,
    DRAFT_LINES,
    DRAFTS,
    LLAMA_CPP_PY,
    LLAMA_SERVER,
    MB,
    SERVERS,
    WORKER,
    BenchConfig,
    add_drafts_flag,
    find_llama_server,
    find_model,
)
from bench.prompts import PromptFactory
from bench.report import (
    environment,
    fmt,
    machine_line,
    publish,
    pyplot,
    ratio,
    save_chart,
    write_summary,
)
from bench.rounds import each_ratio
from bench.servers import RssSampler, running_server

# --------------------------------------------------------------------------- results


@dataclass
class LevelResult:
    server: str
    prompt_tokens: int
    clients: int
    requests: int  # completed requests
    cut: int  # requests cancelled because they were still running when the level timed out
    errors: int
    tokens_per_request: float  # mean generated tokens, to show every server generated max_tokens
    agg_tok_s: float  # generated tokens of the level's work / the level's wall time
    requests_per_s: float  # completed requests / the level's wall time
    wall_s: float  # first request sent to last one finished
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    # The longest wait between two tokens of one request: a prompt prefilled whole beside running streams stalls
    # them all once (few gaps, past the p99), one prefilled in chunks stalls them less, more often.
    itl_max_ms: float
    decode_tok_s_p50: float  # per stream, first to last token of a request (excludes prefill)
    peak_rss_mb: float  # server process tree, during this level
    background_cpu: float  # share of all cores busy just before the level, while the server idled
    engine: engine_time.EngineTime | None = None  # llm-worker's engine counters over the level


@dataclass
class ServerRun:
    server: str
    argv: list[str]
    startup_s: float
    peak_rss_mb: float  # whole run, load included
    levels: list[LevelResult]


# --------------------------------------------------------------------------- workload


async def client_loop(
    cid: int, url: str, session: aiohttp.ClientSession, cfg: BenchConfig, prompts: PromptFactory,
    prompt_tokens: int, results: list[RequestResult],
) -> None:
    no_eos = {str(t): -100.0 for t in prompts.end_of_generation}
    for index in range(cfg.requests_per_client):
        # Build the prompt before the clock starts: tokenizing is the client's cost, not the server's.
        body = request_body(cfg, prompts.prompt(prompt_tokens), cfg.seed + 10_000 * cid + index,
                            no_eos, cfg.max_tokens)
        result = RequestResult(client=cid, sent=time.perf_counter())
        results.append(result)  # now, so a request cancelled mid-stream still counts its tokens
        try:
            await stream_completion(session, url, body, result)
        except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        except asyncio.CancelledError:
            result.cut = True
            raise


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN when there is nothing to rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


async def run_level(url: str, cfg: BenchConfig, prompts: PromptFactory, prompt_tokens: int, clients: int,
                    sampler: RssSampler, server: str) -> LevelResult:
    results: list[RequestResult] = []
    background = background_cpu()
    if background > 0.15:
        print(f"    warning: {background:.0%} of the CPU was busy with something else just before this level",
              file=sys.stderr)
    async with new_session() as session:
        counters = await engine_time.read(session, url)
        t0 = time.perf_counter()
        # A fixed amount of work per level (not a time window, which heavy levels cannot fill); the
        # timeout only bounds a server that queues every request behind the others.
        clients_done = asyncio.gather(*(client_loop(c, url, session, cfg, prompts, prompt_tokens, results)
                                        for c in range(clients)))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(clients_done, timeout=cfg.level_timeout_s)
        wall = time.perf_counter() - t0
        after = await engine_time.read(session, url)
        engine = engine_time.EngineTime.between(counters, after, wall) if counters and after else None
        await settle(session, url)
    # Latency covers every request of the level (a cut one included once it had its first token).
    ok = [r for r in results if r.complete]
    started = [r for r in results if r.error is None and r.chunk_times]
    ttfts = [r.ttft * 1000 for r in started if r.ttft is not None]
    gaps = [(b - a) * 1000 for r in started for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    decode = [(r.tokens - r.tokens / len(r.chunk_times)) / (r.chunk_times[-1] - r.chunk_times[0])
              for r in started if len(r.chunk_times) > 1]
    errors = [r for r in results if r.error is not None]
    if errors:
        print(f"    {len(errors)} failed requests, first: {errors[0].error}", file=sys.stderr)
    return LevelResult(
        server=server, prompt_tokens=prompt_tokens, clients=clients, requests=len(ok),
        cut=sum(r.cut for r in results), errors=len(errors),
        tokens_per_request=statistics.fmean(r.tokens for r in ok) if ok else float("nan"),
        agg_tok_s=sum(r.tokens for r in results if r.error is None) / wall,
        requests_per_s=len(ok) / wall,
        wall_s=wall,
        ttft_p50_ms=percentile(ttfts, 50), ttft_p99_ms=percentile(ttfts, 99),
        itl_p50_ms=percentile(gaps, 50), itl_p99_ms=percentile(gaps, 99), itl_max_ms=max(gaps, default=float("nan")),
        decode_tok_s_p50=percentile(decode, 50),
        peak_rss_mb=sampler.peak(t0, time.perf_counter()) / MB,
        background_cpu=background,
        engine=engine,
    )


def background_cpu(interval: float = 0.5) -> float:
    """Share of all cores busy over `interval` while the server idles: anything else
    running on a small machine skews the next level, so the report shows it."""
    def busy_total() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)
    try:
        b0, t0 = busy_total()
        time.sleep(interval)
        b1, t1 = busy_total()
    except OSError:
        return float("nan")
    return (b1 - b0) / max(1, t1 - t0)


async def settle(session: aiohttp.ClientSession, url: str) -> None:
    """Wait until the server has dropped the cancelled requests, so levels do not overlap.

    A one-token request is answered only after whatever a sequential server still has
    queued; a batching server answers it at once.
    """
    body = {"prompt": "Hello", "max_tokens": 1, "temperature": 0, "stream": True}
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
        await stream_completion(session, url, body, RequestResult(client=-1, sent=time.perf_counter()))


async def warm_up(url: str, cfg: BenchConfig, prompts: PromptFactory) -> None:
    """One short request so lazy allocations and first-call costs stay out of the first level."""
    async with new_session() as session:
        body = request_body(cfg, prompts.prompt(64), cfg.seed, {}, 8)
        result = RequestResult(client=-1, sent=time.perf_counter())
        await stream_completion(session, url, body, result)
        if result.error:
            raise RuntimeError(f"warm-up request failed: {result.error}")


def bench_server(name: str, cfg: BenchConfig, prompts: PromptFactory) -> ServerRun:
    print(f"== {name}", file=sys.stderr)
    prompts.restart()
    with running_server(name, cfg) as (url, _proc, sampler, startup_s, argv):
        print(f"   healthy after {startup_s:.1f}s: {' '.join(argv)}", file=sys.stderr)
        asyncio.run(warm_up(url, cfg, prompts))
        levels = []
        for prompt_tokens in cfg.prompt_lengths:
            for clients in cfg.concurrencies:
                level = asyncio.run(run_level(url, cfg, prompts, prompt_tokens, clients, sampler, name))
                print(f"   prompt {prompt_tokens:4d} clients {clients:2d}: {level.agg_tok_s:7.1f} tok/s  "
                      f"TTFT p50 {level.ttft_p50_ms:7.0f} ms  ITL p50 {level.itl_p50_ms:5.1f} ms  "
                      f"({level.requests} requests of {level.tokens_per_request:.0f} tokens, {level.cut} cut)",
                      file=sys.stderr)
                levels.append(level)
        peak = sampler.peak() / MB
    return ServerRun(server=name, argv=argv, startup_s=startup_s, peak_rss_mb=peak, levels=levels)


# --------------------------------------------------------------------------- rounds


def median_runs(servers: tuple[str, ...], by_round: list[list[ServerRun]]) -> list[ServerRun]:
    """Each server's run with every figure the median over the rounds (one round: that round's)."""
    merged = []
    for server in servers:
        runs = [run for runs in by_round for run in runs if run.server == server]
        levels = []
        for at, first in enumerate(runs[0].levels):
            same = [run.levels[at] for run in runs]
            levels.append(replace(first, **{name: statistics.median(getattr(level, name) for level in same)
                                            for name in NUMBERS}))
        merged.append(replace(runs[0], startup_s=statistics.median(run.startup_s for run in runs),
                              peak_rss_mb=statistics.median(run.peak_rss_mb for run in runs), levels=levels))
    return merged


def tok_s_ratios(cfg: BenchConfig, by_round: list[list[ServerRun]]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Each round's llm-worker/peer tok/s ratio, by peer and level ("PROMPTxCLIENTS", the summary's keys)."""
    by_peer: dict[str, dict[str, dict[str, list[float]]]] = {}
    for peer in (server for server in cfg.servers if server != WORKER):
        for prompt in cfg.prompt_lengths:
            for clients in cfg.concurrencies:
                pairs = [(ours.agg_tok_s, theirs.agg_tok_s) for runs in by_round
                         if (ours := find_level(runs, WORKER, prompt, clients))
                         and (theirs := find_level(runs, peer, prompt, clients))]
                if pairs:
                    by_peer.setdefault(peer, {})[f"{prompt}x{clients}"] = {"agg_tok_s": each_ratio(pairs)}
    return by_peer


def round_ratios(by_peer: dict[str, dict[str, dict[str, list[float]]]], rounds: int) -> str:
    """The report's table of them: how far one run's ratio moves here."""
    if rounds < 2:
        return ""
    lines = ["", "## Each round's tok/s ratio, llm-worker / peer", "", "| peer | prompt | clients | rounds |",
             "|---|---|---|---|"]
    for peer, levels in by_peer.items():
        for level, figures in levels.items():
            prompt, clients = level.split("x")
            lines.append(f"| {peer} | {prompt} | {clients} | {', '.join(f'{r:.2f}x' for r in figures['agg_tok_s'])} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- report

METRICS = (  # field, column title, format, higher is better
    ("agg_tok_s", "tok/s", "{:.1f}", True),
    ("requests_per_s", "req/s", "{:.2f}", True),
    ("decode_tok_s_p50", "decode tok/s/stream p50", "{:.1f}", True),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.0f}", False),
    ("ttft_p99_ms", "TTFT p99 ms", "{:.0f}", False),
    ("itl_p50_ms", "ITL p50 ms", "{:.1f}", False),
    ("itl_p99_ms", "ITL p99 ms", "{:.1f}", False),
    ("itl_max_ms", "longest gap ms", "{:.0f}", False),
    ("peak_rss_mb", "peak RSS MB", "{:.0f}", False),
)


# Every figure of a level that rounds take the median of.
NUMBERS = (*(metric[0] for metric in METRICS), "wall_s", "tokens_per_request", "background_cpu")


def find_level(runs: list[ServerRun], server: str, prompt: int, clients: int) -> LevelResult | None:
    for run in runs:
        if run.server == server:
            for level in run.levels:
                if level.prompt_tokens == prompt and level.clients == clients:
                    return level
    return None


def markdown_report(cfg: BenchConfig, runs: list[ServerRun], env: dict[str, Any], prompts: PromptFactory) -> str:
    model_mb = cfg.model.stat().st_size / MB
    lines = [
        "# llm-worker benchmark",
        "",
        machine_line(cfg, env),
        f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context in all "
        f"({cfg.ctx_per_slot} per slot; llama_cpp.server, which has one slot, gets {cfg.ctx_per_slot}), "
        f"{cfg.threads} threads; f16 KV cache for {cfg.ctx_size} tokens = "
        f"{prompts.kv_cache_bytes(cfg.ctx_size) / MB:.0f} MB",
        f"- workload: closed loop, {cfg.max_tokens} generated tokens per request, temperature {cfg.temperature}, "
        f"seed {cfg.seed} + request index; per level every client sends {cfg.requests_per_client} requests back "
        "to back, and tok/s and req/s are that work over the level's wall time; latency covers every request",
        f"- drafts: {DRAFT_LINES[env.get('drafts', 'off')]}; {env.get('rounds', 1)} round(s), every server once a "
        "round, the order reversed every other round; figures are medians over the rounds",
        "",
    ]
    header = ("| server | prompt | clients | " + " | ".join(m[1] for m in METRICS)
              + " | tok/req | cut | errors | background CPU |")
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for prompt in cfg.prompt_lengths:
        for clients in cfg.concurrencies:
            for run in runs:
                lv = find_level(runs, run.server, prompt, clients)
                if lv is None:
                    continue
                cells = [fmt(m[2], getattr(lv, m[0])) for m in METRICS]
                lines.append(f"| {run.server} | {prompt} | {clients} | " + " | ".join(cells)
                             + f" | {fmt('{:.0f}', lv.tokens_per_request)} | {lv.cut} | {lv.errors}"
                             f" | {fmt('{:.0%}', lv.background_cpu)} |")
    peers = [r.server for r in runs if r.server != WORKER]
    if any(r.server == WORKER for r in runs) and peers:
        lines += ["", "## llm-worker / peer", "",
                  "Ratios of llm-worker's value to the peer's; for tok/s higher is better, "
                  "for latency and RSS lower is.",
                  ""]
        header = "| peer | prompt | clients | " + " | ".join(m[1] for m in METRICS) + " |"
        lines += [header, "|" + "---|" * (header.count("|") - 1)]
        for peer in peers:
            for prompt in cfg.prompt_lengths:
                for clients in cfg.concurrencies:
                    ours, theirs = find_level(runs, WORKER, prompt, clients), find_level(runs, peer, prompt, clients)
                    if ours and theirs:
                        cells = [fmt("{:.2f}x", ratio(getattr(ours, m[0]), getattr(theirs, m[0]))) for m in METRICS]
                        lines.append(f"| {peer} | {prompt} | {clients} | " + " | ".join(cells) + " |")
    lines += engine_report(runs)
    lines += ["", "## Peak RSS over the whole run (load included)", "",
              "| server | startup s | peak RSS MB | peak RSS - model MB |", "|---|---|---|---|"]
    for run in runs:
        lines.append(f"| {run.server} | {run.startup_s:.1f} | {run.peak_rss_mb:.0f} "
                     f"| {run.peak_rss_mb - model_mb:.0f} |")
    targets = target_checks(cfg, runs, model_mb)
    if targets:
        lines += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in targets]
    if any(lv.background_cpu > 0.15 for run in runs for lv in run.levels):
        lines += ["", "**Warning:** other processes kept the CPU busy before some levels (background CPU "
                  "column); rerun on a quiet machine before trusting those rows."]
    return "\n".join(lines) + "\n"


def engine_report(runs: list[ServerRun]) -> list[str]:
    """Per level, where llm-worker's wall time went (bench/engine_time.py); nothing for a run without it."""
    timed = [lv for run in runs for lv in run.levels if lv.engine and lv.engine.steps]
    if not timed:
        return []
    lines = ["", "## Where llm-worker's time went", "",
             "Its engine counters over each level: a step runs one llama_decode for the decode rows and one per "
             "prefill chunk; the engine's Python is the step's time outside llama_decode.", "",
             "| prompt | clients | steps | ms a step | of it in llama_decode | engine Python ms a step "
             "| llama_decode share of the wall time |", "|---|---|---|---|---|---|---|"]
    for lv in timed:
        e = lv.engine
        lines.append(f"| {lv.prompt_tokens} | {lv.clients} | {e.steps} | {e.ms_per_step:.1f} "
                     f"| {e.decode_ms_per_step:.1f} | {e.python_ms_per_step:.2f} | {e.decode_share:.1%} |")
    return lines


def target_checks(cfg: BenchConfig, runs: list[ServerRun], model_mb: float) -> list[tuple[str, str, bool]]:
    """The issue's acceptance targets, evaluated on whatever levels were run."""
    checks: list[tuple[str, str, bool]] = []
    worker = next((r for r in runs if r.server == WORKER), None)
    if worker is None:
        return checks
    for prompt in cfg.prompt_lengths:
        ours1, ref1 = find_level(runs, WORKER, prompt, 1), find_level(runs, LLAMA_SERVER, prompt, 1)
        if ours1 and ref1:
            r = ratio(ours1.decode_tok_s_p50, ref1.decode_tok_s_p50)
            checks.append((f"single-stream decode tok/s >= 0.95x llama-server (prompt {prompt})", fmt("{:.2f}x", r),
                           r >= 0.95))
        ours8 = find_level(runs, WORKER, prompt, 8)
        for peer, need in ((LLAMA_SERVER, 1.0), (LLAMA_CPP_PY, 3.0)):
            theirs = find_level(runs, peer, prompt, 8)
            if ours8 and theirs:
                r = ratio(ours8.agg_tok_s, theirs.agg_tok_s)
                checks.append((f"aggregate tok/s at 8 clients >= {need:g}x {peer} (prompt {prompt})",
                               fmt("{:.2f}x", r), r >= need))
        ref8 = find_level(runs, LLAMA_SERVER, prompt, 8)
        if ours8 and ref8:
            r = ratio(ours8.ttft_p50_ms, ref8.ttft_p50_ms)
            checks.append((f"TTFT p50 at 8 clients <= 1.1x llama-server (prompt {prompt})", fmt("{:.2f}x", r),
                           r <= 1.1))
    overhead = worker.peak_rss_mb - model_mb
    checks.append(("llm-worker peak RSS - model size <= 150 MB", f"{overhead:.0f} MB", overhead <= 150))
    return checks


def draw_chart(cfg: BenchConfig, runs: list[ServerRun], path: Path) -> bool:
    if (plt := pyplot()) is None:
        return False
    fig, axes = plt.subplots(2, len(cfg.prompt_lengths), figsize=(max(7.0, 5.5 * len(cfg.prompt_lengths)), 8),
                             squeeze=False)
    for col, prompt in enumerate(cfg.prompt_lengths):
        for row, (metric, title) in enumerate((("agg_tok_s", "aggregate generated tok/s"),
                                               ("ttft_p50_ms", "TTFT p50 (ms)"))):
            ax = axes[row][col]
            for run in runs:
                levels = [lv for lv in run.levels if lv.prompt_tokens == prompt]
                ax.plot([lv.clients for lv in levels], [getattr(lv, metric) for lv in levels], marker="o",
                        label=run.server)
            ax.set_xscale("log", base=2)
            ax.set_xticks(list(cfg.concurrencies), [str(c) for c in cfg.concurrencies])
            if metric == "ttft_p50_ms" and any(getattr(lv, metric) > 0 for r in runs for lv in r.levels):
                ax.set_yscale("log")  # sequential servers queue: their TTFT is orders of magnitude higher
            ax.set_xlabel("concurrent clients")
            ax.set_title(f"{title}, {prompt}-token prompt")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.suptitle(f"{cfg.model.name}\n{cfg.threads} threads, {cfg.parallel} slots, {cfg.ctx_size} context, "
                 f"{cfg.max_tokens} generated tokens per request")
    return save_chart(plt, fig, path)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> tuple[BenchConfig, str, int]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="GGUF file (default: llm-worker's default model, SmolLM2-135M Q4_1)")
    p.add_argument("--servers", default=",".join(SERVERS), help=f"comma-separated subset of {','.join(SERVERS)}")
    p.add_argument("--quick", action="store_true", help="128-token prompts, 1 and 8 clients, 2 requests each")
    p.add_argument("--concurrency", help="comma-separated client counts (default 1,4,8,16)")
    p.add_argument("--prompt-tokens", help="comma-separated prompt lengths in tokens (default 128,512; quick 128)")
    p.add_argument("--requests", type=int, help="requests each client sends per level (default 4, quick 2)")
    p.add_argument("--level-timeout", type=float, default=900.0,
                   help="seconds after which a level's in-flight requests are cut (default 900)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--parallel", type=int, default=8, help="slots (llm-worker --parallel, llama-server -np)")
    p.add_argument("--ctx-size", type=int, default=8192, help="total context across slots")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--llama-server", help="llama-server binary (default: build it with bench/build_llama_server.sh)")
    p.add_argument("--out", default=str(BENCH_DIR / "results"), help="where latest.md/.json, chart.png and logs go")
    p.add_argument("--publish", action="store_true",
                   help="also copy the report and chart to bench/RESULTS.md and bench/chart.png")
    p.add_argument("--worker-args", default="", help="extra `llm-worker serve` flags, e.g. '--prefix-cache fast'")
    add_drafts_flag(p)
    p.add_argument("--rounds", type=int, default=1,
                   help="run every server this many times, the order reversed every other round: the tables give "
                        "medians, and each round's llm-worker/peer tok/s ratio")
    p.add_argument("--summary", help="with --publish: commit the run as bench/results/summaries/SUMMARY.json only, "
                                     "not as bench/RESULTS*.md (a run that a table elsewhere quotes)")
    a = p.parse_args(argv)
    servers = tuple(s.strip() for s in a.servers.split(",") if s.strip())
    if unknown := set(servers) - set(SERVERS):
        p.error(f"unknown server(s) {sorted(unknown)}; choose from {SERVERS}")
    concurrency = a.concurrency or ("1,8" if a.quick else "1,4,8,16")
    prompt_tokens = a.prompt_tokens or ("128" if a.quick else "128,512")
    return BenchConfig(
        model=find_model(a.model),
        servers=servers,
        prompt_lengths=tuple(int(x) for x in prompt_tokens.split(",")),
        concurrencies=tuple(int(x) for x in concurrency.split(",")),
        requests_per_client=a.requests if a.requests is not None else (2 if a.quick else 4),
        level_timeout_s=a.level_timeout,
        max_tokens=a.max_tokens,
        parallel=a.parallel,
        ctx_size=a.ctx_size,
        threads=a.threads,
        temperature=a.temperature,
        seed=a.seed,
        llama_server_bin=find_llama_server(a.llama_server) if LLAMA_SERVER in servers else None,
        out_dir=Path(a.out).resolve(),
        publish=a.publish,
        worker_args=(*DRAFTS[a.drafts][0], *a.worker_args.split()),
        peer_args=DRAFTS[a.drafts][1],
    ), a.drafts, a.rounds, a.summary


def main(argv: list[str] | None = None) -> int:
    # SIGTERM (e.g. from `timeout`) must unwind like Ctrl-C so the servers get stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    cfg, drafts, rounds, summary_name = parse_args(argv)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    prompts = PromptFactory(cfg.model)
    env = {**environment(cfg), "drafts": drafts, "rounds": rounds}
    by_round = [[bench_server(name, cfg, prompts) for name in (cfg.servers if n % 2 == 0 else cfg.servers[::-1])]
                for n in range(rounds)]
    runs = median_runs(cfg.servers, by_round)
    by_peer = tok_s_ratios(cfg, by_round)
    report = markdown_report(cfg, runs, env, prompts) + round_ratios(by_peer, rounds)
    print(report)
    (cfg.out_dir / "latest.md").write_text(report)
    raw = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
           "environment": env, "rounds": [[asdict(r) for r in runs] for runs in by_round]}
    (cfg.out_dir / "latest.json").write_text(json.dumps(raw, indent=2, default=str) + "\n")
    chart = cfg.out_dir / "chart.png"
    has_chart = draw_chart(cfg, runs, chart)
    if cfg.publish:
        write_summary(summary_name or f"throughput-drafts-{drafts}", env, {
            run.server: {f"{lv.prompt_tokens}x{lv.clients}": {m[0]: round(getattr(lv, m[0]), 2) for m in METRICS}
                         for lv in run.levels} | {"peak_rss_mb": round(run.peak_rss_mb)} for run in runs},
                      round_ratios=by_peer if rounds > 1 else None)
        if summary_name is None:
            name = "RESULTS.md" if drafts == "off" else "RESULTS-DRAFTS.md"
            publish(report, chart if has_chart and drafts == "off" else None, name,
                    "tok/s and TTFT against concurrency")
    print(f"wrote {cfg.out_dir}/latest.md, latest.json{', chart.png' if has_chart else ''} "
          f"in {time.perf_counter() - began:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
