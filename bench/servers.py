"""Starting and stopping each server (llm-worker, llama-server, llama_cpp.server) alone, and measuring its RSS."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp

from bench.config import LLAMA_CPP_PY, LLAMA_SERVER, REPO_DIR, WORKER, BenchConfig
from worker.engine.host import SWITCH_ENV


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(name: str, cfg: BenchConfig, port: int) -> tuple[list[str], str]:
    """argv and health path. Only slots, context and threads are set; the rest stay each server's defaults."""
    host = ["--host", "127.0.0.1", "--port", str(port)]
    if name == WORKER:
        exe = REPO_DIR / ".venv" / "bin" / "llm-worker"
        base = [str(exe)] if exe.exists() else [sys.executable, "-m", "worker"]
        return [
            *base, "serve", "--model", str(cfg.model), *host,
            "--parallel", str(cfg.parallel), "--ctx-size", str(cfg.ctx_size), "--threads", str(cfg.threads),
            "--log-level", "warning", *(() if cfg.cache_ram else ("--cache-ram", "0")), *cfg.worker_args,
        ], "/health"
    if name == LLAMA_SERVER:
        assert cfg.llama_server_bin is not None
        return [
            str(cfg.llama_server_bin), "-m", str(cfg.model), *host,
            "-np", str(cfg.parallel), "-c", str(cfg.ctx_size), "-t", str(cfg.threads), "-tb", str(cfg.threads),
            "--no-webui", *(() if cfg.cache_ram else ("--cache-ram", "0")), *cfg.peer_args,
        ], "/health"
    if name == LLAMA_CPP_PY:
        return [
            sys.executable, "-m", "llama_cpp.server", "--model", str(cfg.model), *host,
            # It runs one request at a time, so it gets one slot's worth of context.
            "--n_ctx", str(cfg.ctx_per_slot), "--n_threads", str(cfg.threads),
            "--n_threads_batch", str(cfg.threads),
            # By default a new request aborts the one being streamed; under concurrent
            # clients that truncates nearly every response.
            "--interrupt_requests", "false",
        ], "/v1/models"
    raise ValueError(name)


def process_tree_rss(pid: int) -> int:
    """VmRSS of pid and all its descendants, in bytes (0 once it has exited)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


class RssSampler:
    """Samples the server tree's RSS every 100 ms on a thread, so peaks between requests count too."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self._pid, self._interval = pid, interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), process_tree_rss(self._pid)))
            self._stop.wait(self._interval)

    def peak(self, start: float = 0.0, end: float = float("inf")) -> int:
        return max((rss for t, rss in self.samples if start <= t <= end), default=0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def peer_environment() -> dict[str, str]:
    """A peer's environment: this one without the batch-invariance switch, which the patched llama-server would read
    (bench/build_llama_server.sh): the peer runs the kernels llama.cpp ships, as the worker's fast mode does."""
    return {key: value for key, value in os.environ.items() if key != SWITCH_ENV}


@contextlib.contextmanager
def running_server(name: str, cfg: BenchConfig) -> Iterator[tuple[str, subprocess.Popen, RssSampler, float, list[str]]]:
    port = free_port()
    argv, health = server_command(name, cfg, port)
    log_path = cfg.out_dir / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        # Own process group, so stopping it also stops anything it spawned.
        env = {**os.environ, **dict(cfg.worker_env)} if name == WORKER else peer_environment()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_DIR, start_new_session=True,
                                env=env)
        sampler = RssSampler(proc.pid)
        try:
            url = f"http://127.0.0.1:{port}"
            asyncio.run(wait_healthy(url + health, proc, log_path))
            yield url, proc, sampler, time.perf_counter() - t0, argv
        finally:
            sampler.stop()
            stop_process(proc)


async def wait_healthy(url: str, proc: subprocess.Popen, log_path: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"server exited with {proc.returncode} before it was healthy:\n{tail}")
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f}s; see {log_path}")


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

