"""Probe: where the worker's resident memory goes beside the model, against llama-server's on the same run.

Each server is started as `bench/run.py throughput` starts it (bench/servers.py: 8 slots, 8192 tokens of context,
2 threads, the host-memory cache off, drafts off), one after the other, and driven by a small chat load: one chat
answered whole, one streamed, then 8 at once (half streamed), ~190-token prompts and 96-token answers; then 8 long
chats (~830-token prompts) that fill ~90 % of every slot's cells, the worst case for a KV cache resident as it fills.
For each it prints the RSS at each stage, the most sampled while serving the chats, and the peak (VmHWM, the load
included) after the chats and after the long ones, each also less the model file (what docs/benchmarks.md's "peak
RSS less the model" row subtracts); then where the RSS lies after the chats (/proc/PID/smaps): the model's mapping,
other files (libraries), ggml's buffers (anonymous mappings of 32 MiB and more: the KV cache, the compute buffer),
glibc's heaps (brk and the per-thread arenas), Python's object arenas (1 MiB anonymous mappings) and the rest.

The worker runs under a wrapper that is `llm-worker serve` plus two signal handlers: SIGUSR1 writes the modules it
has imported, SIGUSR2 calls glibc's malloc_trim(0). At the end the probe asks for both: the RSS malloc_trim gives
back is what the allocator holds free, and the modules, replayed in their import order in a fresh Python (other
packages first), give each top-level package's share of the RSS imports cost (charged with what it imports first).

Variants of the worker (--variant 'NAME=VALUE ...', environment for its process) run after the plain one, with the
same load: MALLOC_ARENA_MAX=2; PYTHONTRACEMALLOC=1 (then Python's largest allocation sites are printed);
PYTHONPATH=DIR, a copy of worker/ with a change undone (a before/after in one run).

Run: .venv/bin/python bench/probes/rss.py [--model GGUF] [--llama-server BIN] [--variant ENV ...] [--no-peer]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import DRAFTS, LLAMA_SERVER, MB, WORKER, BenchConfig, find_llama_server, find_model
from bench.servers import RssSampler, free_port, server_command, stop_process, wait_healthy

# `llm-worker serve` (the console script is `from worker.cli import main; main()`), with the probe's two signals.
WRAPPER = """
import ctypes, os, signal, sys
def modules(*_):
    import tracemalloc
    if tracemalloc.is_tracing():  # PYTHONTRACEMALLOC=1 (a --variant): where Python's allocations were made
        top = tracemalloc.take_snapshot().statistics("lineno")[:20]
        with open(os.environ["RSS_PROBE_MODULES"] + ".tracemalloc", "w") as f:
            f.write("\\n".join(f"{s.size / 2**20:7.2f} MB {s.count:8d} {s.traceback}" for s in top))
    with open(os.environ["RSS_PROBE_MODULES"] + ".part", "w") as f:
        f.write("\\n".join(sys.modules))
    os.rename(os.environ["RSS_PROBE_MODULES"] + ".part", os.environ["RSS_PROBE_MODULES"])
signal.signal(signal.SIGUSR1, modules)
signal.signal(signal.SIGUSR2, lambda *_: ctypes.CDLL(None).malloc_trim(0))
sys.argv = ["llm-worker", *sys.argv[1:]]
from worker.cli import main
main()
"""

# What a person at a terminal or a chat front end sends: distinct questions, some streamed.
TOPICS = ("the water cycle", "how a bicycle gear works", "the history of the printing press", "why the sky is blue",
          "how vaccines train the immune system", "the rules of chess", "how a compiler works", "photosynthesis",
          "the causes of the French revolution", "how bread rises")


def chat_body(index: int, stream: bool, repeats: int = 2) -> dict:
    """A ~80-token question said `repeats` times (161 tokens twice), answered in at most 96 tokens."""
    topic = TOPICS[index % len(TOPICS)]
    text = (f"Question {index}. I am preparing a short lesson for a class of curious twelve-year-olds about {topic}. "
            "Please explain it step by step in plain words, give one everyday example they will recognise, name one "
            "common misunderstanding and correct it, and end with a question they could discuss in pairs. Keep "
            "the whole answer friendly, accurate and no longer than a few short paragraphs. ") * repeats
    return {"messages": [{"role": "system", "content": "You are a patient teacher."},
                         {"role": "user", "content": text}],
            "max_tokens": 96, "temperature": 0, "seed": index, "stream": stream}


async def chat(session: aiohttp.ClientSession, url: str, index: int, stream: bool, repeats: int = 2) -> None:
    async with session.post(url + "/v1/chat/completions", json=chat_body(index, stream, repeats)) as response:
        response.raise_for_status()
        await response.read()


def status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def rss(pid: int) -> float:
    return status_kb(pid, "VmRSS") / 1024


def smaps(pid: int, model: Path) -> Counter[str]:
    """MB resident by kind (the module docstring's)."""
    kinds: Counter[str] = Counter()
    kind = ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                parts = line.split(None, 5)
                name = parts[5].strip() if len(parts) > 5 else ""
                start, end = (int(x, 16) for x in parts[0].split("-"))
                size = end - start
                if name == str(model):
                    kind = "model"
                elif name == "[heap]" or (not name and start % (64 * MB) == 0 and size <= 64 * MB):
                    kind = "glibc heaps"  # brk, and the per-thread arenas (64 MiB-aligned reservations)
                elif name.startswith("/"):
                    kind = "libraries, other files"
                elif name:
                    kind = "stack, vdso"  # [stack], [vvar], [vdso]
                elif size >= 32 * MB:
                    kind = "ggml buffers"
                elif size == MB:
                    kind = "Python arenas"
                else:
                    kind = "other anonymous"
            elif line.startswith("Rss:"):
                kinds[kind] += int(line.split()[1]) / 1024
    return kinds


@dataclass
class Run:
    name: str
    model: Path
    model_mb: float
    stages: dict[str, float] = field(default_factory=dict)  # RSS MB at each stage
    serving_peak: float = 0.0  # the most RSS sampled (every 20 ms) from healthy to the end of the chat load, MB
    peak: float = 0.0  # VmHWM MB after the chat load: the process's most, its load included
    full_peak: float = 0.0  # VmHWM MB after 8 long chats that fill ~90 % of every slot's cells
    kinds: Counter[str] = field(default_factory=Counter)
    trimmed: float | None = None  # RSS MB after malloc_trim(0), worker only
    modules: list[str] = field(default_factory=list)
    tracemalloc: str = ""  # the largest allocation sites, under PYTHONTRACEMALLOC=1


async def drive(url: str, pid: int, run: Run) -> None:
    # A connection a request: llama-server may close a kept-alive one just as the client reuses it.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600),
                                     connector=aiohttp.TCPConnector(force_close=True)) as session:
        run.stages["healthy"] = rss(pid)
        sampler = RssSampler(pid, interval=0.02)
        try:
            await chat(session, url, 100, stream=False)
            run.stages["1 chat"] = rss(pid)
            await chat(session, url, 101, stream=True)
            run.stages["2 chats"] = rss(pid)
            await asyncio.gather(*(chat(session, url, i, stream=i % 2 == 0) for i in range(8)))
            run.stages["8 at once"] = rss(pid)
        finally:
            sampler.stop()
        run.serving_peak = sampler.peak() / MB
        run.peak = status_kb(pid, "VmHWM") / 1024
        run.kinds = smaps(pid, run.model)
        # The worst case for a cache resident as it fills: every slot near its 1,024 cells (~830-token prompts).
        await asyncio.gather(*(chat(session, url, 200 + i, stream=i % 2 == 0, repeats=10) for i in range(8)))
        run.stages["8 long chats"] = rss(pid)
        run.full_peak = status_kb(pid, "VmHWM") / 1024


def measure(name: str, cfg: BenchConfig, env: dict[str, str]) -> Run:
    port = free_port()
    argv, health = server_command(WORKER if name != LLAMA_SERVER else LLAMA_SERVER, cfg, port)
    with tempfile.TemporaryDirectory() as tmp:
        modules_file = Path(tmp) / "modules"
        if name != LLAMA_SERVER:
            argv = [sys.executable, "-c", WRAPPER, *argv[argv.index("serve"):]]
            env = {**env, "RSS_PROBE_MODULES": str(modules_file)}
        log_path = Path(tmp) / "log"
        run = Run(name, cfg.model, cfg.model.stat().st_size / MB)
        with open(log_path, "wb") as log:
            # Not started in the checkout, whose worker/ would come first on `python -c`'s path: a PYTHONPATH variant
            # (another copy of the worker) is then the one that runs.
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, **env}, cwd=tmp)
            try:
                url = f"http://127.0.0.1:{port}"
                asyncio.run(wait_healthy(url + health, proc, log_path))
                time.sleep(1)  # what the load left settle (the worker announces itself, then idles)
                asyncio.run(drive(url, proc.pid, run))
                if name != LLAMA_SERVER:
                    os.kill(proc.pid, signal.SIGUSR1)
                    deadline = time.monotonic() + 120
                    while not modules_file.exists() and time.monotonic() < deadline:
                        time.sleep(0.2)
                    run.modules = modules_file.read_text().split("\n")
                    if (traced := modules_file.with_suffix(".tracemalloc")).exists():
                        run.tracemalloc = traced.read_text()
                    os.kill(proc.pid, signal.SIGUSR2)
                    time.sleep(1)
                    run.trimmed = rss(proc.pid)
            finally:
                stop_process(proc)
    return run


def report(runs: list[Run]) -> None:
    stages = list(runs[0].stages)
    print("RSS (VmRSS) at each stage, MB")
    print(f"| server | {' | '.join(stages)} | after malloc_trim |")
    print("|---|" + "---|" * (len(stages) + 1))
    for run in runs:
        trimmed = f"{run.trimmed:.0f}" if run.trimmed is not None else ""
        print(f"| {run.name} | {' | '.join(f'{run.stages[s]:.0f}' for s in stages)} | {trimmed} |")
    print("\npeaks, MB; 'less model' subtracts the model file's size, as docs/benchmarks.md's row does")
    print("| server | serving peak (sampled) | VmHWM after the chats (load included) | less model "
          "| VmHWM after 8 long chats | less model |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(f"| {run.name} | {run.serving_peak:.0f} | {run.peak:.0f} | {run.peak - run.model_mb:.0f} "
              f"| {run.full_peak:.0f} | {run.full_peak - run.model_mb:.0f} |")
    kinds = sorted({k for run in runs for k in run.kinds}, key=lambda k: -runs[0].kinds[k])
    print("\nwhere the RSS lies after the chats (MB, /proc/PID/smaps)")
    print(f"| kind | {' | '.join(run.name for run in runs)} |")
    print("|---|" + "---|" * len(runs))
    for kind in kinds:
        print(f"| {kind} | {' | '.join(f'{run.kinds[kind]:.1f}' for run in runs)} |")
    for run in runs:
        if run.tracemalloc:
            print(f"\n{run.name}: Python's largest allocation sites (MB, blocks)\n{run.tracemalloc}")


def probe_rss(code: str) -> float:
    """RSS MB of a fresh Python once `code` has run."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport re\nprint(re.search(r'VmRSS:\\s+(\\d+)', "
                          "open('/proc/self/status').read()).group(1))"], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1]) / 1024


REPLAY = """
import importlib, re, sys
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
from worker.lazy import package_without_init
before = rss()
if "llama_cpp.llama" not in sys.argv:  # the worker imported llama_cpp's C API without its __init__
    package_without_init("llama_cpp", "llama_cpp")
    print("llama_cpp", rss() - before)
    before = rss()
for name in sys.argv[1:]:
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except Exception:  # a module the worker made under another name (worker.lazy's), or a Cython internal
            continue
        now = rss()
        print(name.split(".")[0], now - before)
        before = now
"""


def imports(modules: list[str]) -> None:
    print("\nimports: RSS of a fresh Python (MB)")
    for code in ("pass", "import worker.cli", "import worker.lifecycle.run"):
        print(f"  {code:<30} {probe_rss(code):6.1f}")
    # The packages the worker imports first, then its own modules: each of those is charged only with itself.
    ordered = sorted((m for m in modules if m and m != "__main__"), key=lambda m: m.split(".")[0] == "worker")
    out = subprocess.run([sys.executable, "-c", REPLAY, *ordered],
                         capture_output=True, text=True, check=True)
    shares: Counter[str] = Counter()
    for line in out.stdout.splitlines():
        top, kb = line.split()
        shares[top] += int(kb) / 1024
    print(f"the serving worker's {len(modules)} modules replayed in their order: {sum(shares.values()):.1f} MB; "
          "by top-level package (each charged with what it imports first):")
    for top, mb in shares.most_common(14):
        print(f"  {top:<20} {mb:6.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model")
    p.add_argument("--llama-server")
    p.add_argument("--variant", action="append", default=[],
                   help="the worker again with this environment, e.g. 'MALLOC_ARENA_MAX=2'")
    p.add_argument("--no-peer", action="store_true", help="the worker only")
    a = p.parse_args()
    cfg = BenchConfig(model=find_model(a.model), servers=(), prompt_lengths=(), concurrencies=(),
                      requests_per_client=0, level_timeout_s=0, max_tokens=96, parallel=8, ctx_size=8192, threads=2,
                      temperature=0.0, seed=0, llama_server_bin=None, out_dir=Path(tempfile.gettempdir()),
                      publish=False, worker_args=DRAFTS["off"][0], peer_args=DRAFTS["off"][1])
    runs = [measure(WORKER, cfg, {})]
    if not a.no_peer:
        runs.append(measure(LLAMA_SERVER, replace(cfg, llama_server_bin=find_llama_server(a.llama_server)), {}))
    for variant in a.variant:
        runs.append(measure(f"{WORKER} {variant}", cfg, dict(v.split("=", 1) for v in variant.split())))
    print(f"{cfg.model.name} ({runs[0].model_mb:.0f} MB), 8 slots, 8192 context, 2 threads, host cache off, "
          "drafts off\n")
    report(runs)
    imports(runs[0].modules)


if __name__ == "__main__":
    main()
