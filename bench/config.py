"""What every bench shares: the paths, the three servers, the settings they start with (BenchConfig), and
finding the model, the llama-server binary and the flags every side-by-side bench takes."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
SERVERS = ("llm-worker", "llama-server", "llama_cpp.server")
WORKER, LLAMA_SERVER, LLAMA_CPP_PY = SERVERS
MB = 1024 * 1024


@dataclass(frozen=True)
class BenchConfig:
    model: Path
    servers: tuple[str, ...]
    prompt_lengths: tuple[int, ...]
    concurrencies: tuple[int, ...]
    requests_per_client: int  # each level's fixed work: every client sends this many requests, back to back
    level_timeout_s: float  # a level still running after this long has its in-flight requests cut
    max_tokens: int
    parallel: int
    ctx_size: int  # all slots together; llama_cpp.server gets ctx_size // parallel (one slot)
    threads: int
    temperature: float
    seed: int
    llama_server_bin: Path | None
    out_dir: Path
    publish: bool
    worker_args: tuple[str, ...] = ()  # extra `llm-worker serve` flags (bench/chat.py runs its cache modes)
    worker_env: tuple[tuple[str, str], ...] = ()  # extra environment for llm-worker (e.g. LLAMA_CPP_LIB_PATH)
    peer_args: tuple[str, ...] = ()  # extra llama-server flags (bench/speculative.py's --spec-type)
    # Each server's host-memory prompt cache (--cache-ram, on by default in both): off unless the workload comes
    # back to prompts its slots gave up (bench/chat.py); with distinct prompts it only holds memory (peak RSS).
    cache_ram: bool = False

    @property
    def ctx_per_slot(self) -> int:
        return self.ctx_size // self.parallel


def find_model(arg: str | None) -> Path:
    """--model, else the worker's own default model (fetched into its cache if needed)."""
    if arg:
        return Path(arg).resolve()
    from worker.source import load_registry, resolve_model

    return resolve_model(None, load_registry()).path


def find_llama_server(arg: str | None) -> Path:
    if arg:
        return Path(arg).resolve()
    if found := shutil.which("llama-server") if os.environ.get("BENCH_USE_PATH_LLAMA_SERVER") else None:
        return Path(found)
    # Builds on first use (minutes), then prints the cached binary's path.
    out = subprocess.run([str(BENCH_DIR / "build_llama_server.sh")], stdout=subprocess.PIPE, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def add_peer_flags(p: argparse.ArgumentParser, *, parallel: int, ctx_size: int, report: str) -> None:
    """The flags every side-by-side bench shares: the model, the llama-server binary, each server's slots,
    context and threads, where results go, and whether to rewrite its `report` in bench/."""
    p.add_argument("--model")
    p.add_argument("--llama-server")
    p.add_argument("--parallel", type=int, default=parallel)
    p.add_argument("--ctx-size", type=int, default=ctx_size)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    p.add_argument("--publish", action="store_true", help=f"also write bench/{report}")


# --drafts: (llm-worker's flags, llama-server's flags). llama-server's best n-gram type on this machine's copying
# and open-ended answers is ngram-simple (bench/SPECULATIVE.md); llama_cpp.server drafts with no flag of these.
DRAFTS = {"off": (("--spec-type", "none"), ()), "on": ((), ("--spec-type", "ngram-simple"))}
DRAFT_LINES = {"off": "off on every server (llm-worker --spec-type none)",
               "on": "llm-worker's prompt lookup (its default) and llama-server's --spec-type ngram-simple; "
                     "llama_cpp.server none"}


def add_drafts_flag(p: argparse.ArgumentParser) -> None:
    """docs/benchmarks.md's first rule: drafts off on every server (the default), or on for each that has them."""
    p.add_argument("--drafts", choices=DRAFTS, default="off",
                   help="off: no server drafts; on: llm-worker's prompt lookup and llama-server's ngram-simple, its "
                        "best n-gram type here (bench/SPECULATIVE.md); llama_cpp.server has none either way")


def add_worker_flags(p: argparse.ArgumentParser, *, parallel: int = 4, ctx_size: int = 8192) -> None:
    """The flags a bench of llm-worker alone takes: the model, its slots, context and threads, where results go."""
    p.add_argument("--model")
    p.add_argument("--parallel", type=int, default=parallel)
    p.add_argument("--ctx-size", type=int, default=ctx_size)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results")


def worker_config(args: argparse.Namespace, max_tokens: int, *worker_args: str) -> BenchConfig:
    """llm-worker alone, from add_worker_flags' flags, with its host-memory cache on (as it ships) and `worker_args`."""
    return BenchConfig(model=find_model(args.model), servers=(WORKER,), prompt_lengths=(), concurrencies=(),
                       requests_per_client=1, level_timeout_s=0, max_tokens=max_tokens, parallel=args.parallel,
                       ctx_size=args.ctx_size, threads=args.threads, temperature=0.0, seed=0, llama_server_bin=None,
                       out_dir=args.out, publish=False, cache_ram=True, worker_args=worker_args)

