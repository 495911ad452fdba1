"""Fixtures: the real test model, and real worker processes serving it on free ports."""

from __future__ import annotations

import compileall
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from worker.engine.host import bound_barrier_spins
from worker.engine.startup.check_record import RECORDS_ENV
from worker.source import load_registry, resolve_model

# The tests that load llama.cpp in this process wait at its barriers as the worker does (worker/engine/thread_waits.py).
bound_barrier_spins()

REPO = Path(__file__).resolve().parent.parent

# The worker processes the tests start load the worker's code compiled, as an installed worker does (pip compiles what
# it installs): from this checkout, with PYTHONDONTWRITEBYTECODE set (as on this project's machines), every start would
# compile all of it again, ~0.4 s of a 3 s start. Only files changed since the last run are compiled here.
compileall.compile_dir(REPO / "worker", quiet=1)


@pytest.fixture(scope="session")
def model_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 from its registry package, cached under the user cache dir."""
    return resolve_model(None, load_registry()).path


@pytest.fixture(scope="session")
def adapter_base(model_path: Path):
    """The test model's tensors that LoRA adapters are made from (bench/adapters.py's Base), read once a run: reading
    the GGUF with gguf-py takes seconds, so the run's shared reader of it (tests/gguf_files.py) does."""
    from bench.adapters import Base
    from tests.gguf_files import read_gguf

    return Base.read(model_path, read_gguf(model_path))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class WorkerProcess:
    process: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)  # past the default 30 s drain
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def start_worker(tmp: Path, *args: str, env: dict[str, str] | None = None, wait: bool = True) -> WorkerProcess:
    """`python -m worker serve` on a free port, waiting until /health says 200."""
    port = free_port()
    log_path = tmp / f"worker-{port}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", "serve", "--port", str(port), "--log-format", "json", *args],
        stdout=subprocess.DEVNULL, stderr=log_path.open("wb"), cwd=REPO, env={**os.environ, **(env or {})},
    )
    worker = WorkerProcess(process, f"http://127.0.0.1:{port}", log_path)
    if wait:
        wait_healthy(worker)
    return worker


def template_worker(tmp: Path, model_path: Path, name: str, template: str, *flags: str,
                    entry: str = "") -> WorkerProcess:
    """The test model served as models.toml entry `name` with its own chat template (and `entry`'s extra keys)."""
    models = tmp / "models.toml"
    # A TOML basic string, escaped as JSON escapes it: a real template may hold any quotes.
    models.write_text(f"[models.{name}]\nchat_template = {json.dumps(template)}\n" + entry +
                      f'[models.{name}.source]\nkind = "path"\npath = "{model_path}"\n')
    return start_worker(tmp, "--model", name, "--models-file", str(models), *flags)


def wait_healthy(worker: WorkerProcess, timeout: float = 120.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.process.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.process.returncode}:\n{worker.log()[-3000:]}")
        try:
            with urllib.request.urlopen(worker.url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    worker.stop()
    raise RuntimeError(f"worker not healthy after {timeout}s:\n{worker.log()[-3000:]}")


@pytest.fixture(scope="session")
def worker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """One shared worker with the default model: 4 slots, 8192 tokens (2048 per request)."""
    process = start_worker(tmp_path_factory.mktemp("worker"), "--parallel", "4", "--ctx-size", "8192")
    yield process
    assert process.stop() == 0, process.log()[-3000:]


@pytest.fixture(scope="session")
def worker_off(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """The reference the exact worker's text is held to: the default model with --prefix-cache off (every prompt
    prefilled whole, nothing reused) and no drafts (one token a step). Its greedy text depends on neither --parallel
    nor --ctx-size, so one serves every comparison with it."""
    process = start_worker(tmp_path_factory.mktemp("off"), "--parallel", "4", "--ctx-size", "8192",
                           "--prefix-cache", "off", "--spec-type", "none")
    yield process
    assert process.stop() == 0, process.log()[-3000:]


@pytest.fixture(scope="session")
def off_conversations(worker_off: WorkerProcess):
    """worker_off's turns of tests/conversations.py's conversations, each asked once a run (OffConversations)."""
    from tests.conversations import OffConversations  # here: it imports tests.helpers, which imports this module

    return OffConversations(worker_off.url)


@pytest.fixture(scope="session")
def base_url(worker: WorkerProcess) -> str:
    return worker.url


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        yield session


def requantized(model_path: Path, qtype: str, folder: Path) -> Path:
    """The test model quantized again to `qtype` (e.g. q4_k_m, f16) by llama.cpp's own quantizer, cached in `folder`.

    SmolLM2's 576-wide rows do not divide into 256-value K-quant blocks, so llama.cpp keeps most of a q4_k_m file
    in Q5_0 and puts Q4_K/Q6_K where rows allow (the ffn_down tensors): both kinds of kernels are in play.
    """
    import llama_cpp

    out = folder / f"smollm2-{qtype}.gguf"
    if not out.exists():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype.upper()}")
        params.allow_requantize = True
        partial = out.with_suffix(".part")
        assert llama_cpp.llama_model_quantize(str(model_path).encode(), str(partial).encode(), params) == 0
        partial.rename(out)
    return out


@pytest.fixture(scope="session")
def quantized(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """quantized("q4_k_m") -> the test model in that type, made once per session."""
    folder = tmp_path_factory.mktemp("quantized")
    return lambda qtype: requantized(model_path, qtype, folder)


TIERS = ("unit", "model", "e2e")  # tests/<tier>/, each a marker: pytest -m unit


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test is marked with its tier, the folder it is in."""
    tests = Path(__file__).resolve().parent
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(tests) and (tier := path.relative_to(tests).parts[0]) in TIERS:
            item.add_marker(tier)


@pytest.fixture(scope="session", autouse=True)
def load_check_records(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The workers a run starts keep their load-time checks' answers in a folder of its own
    (worker/engine/startup/check_record.py): each configuration is measured by the first worker that has it in this
    run, never by an earlier run's."""
    os.environ[RECORDS_ENV] = str(tmp_path_factory.mktemp("load-checks"))
