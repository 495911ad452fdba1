"""Small rules the code keeps: what --help and serving import, one progress type, the metrics handler, the log
bridge."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import Counter

from tests.conftest import REPO

WORKER = REPO / "worker"


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_help_imports_neither_numpy_nor_gguf():
    run = _python(
        "import sys\n"
        "from worker.cli import main\n"
        "sys.argv = ['llm-worker', 'convert', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('numpy', 'gguf', 'huggingface_hub', 'llama_cpp') if m in sys.modules))"
    )
    assert run.returncode == 0, run.stderr
    assert "--type [f16|bf16|q8_0]" in run.stdout  # the choices still come from worker.source
    assert run.stdout.splitlines()[-1] == "[]"


def test_serving_a_local_gguf_imports_neither_the_hub_client_nor_gguf(model_path):
    """They cost ~12 MB of RSS; only a hub download or a SafeTensors conversion loads them."""
    run = _python(
        "import sys\n"
        "import worker.lifecycle.run\n"
        "from worker.source import load_registry, resolve_model\n"
        f"for name in (None, {str(model_path)!r}):  # the registry's package, already downloaded; the file itself\n"
        "    resolve_model(name, load_registry())\n"
        "print(sorted(m for m in ('gguf', 'huggingface_hub', 'yaml') if m in sys.modules))"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "[]"


def test_serving_loads_llama_cpp_only_once_the_library_is_chosen(model_path):
    """The routes, settings and model resolution come first; which libllama loads depends on the model
    (worker/engine/exactness/build_choice.py), and llama_cpp loads it on import."""
    run = _python(
        "import sys\n"
        "from pathlib import Path\n"
        "import worker.lifecycle.run\n"
        "from worker.cli import main\n"
        "from worker.engine import CacheMode, ChatPrompt, EngineConfig, QueueFull, SamplingParams, SchedulerStats\n"
        "from worker.engine.exactness.build_choice import choose_library\n"
        f"choose_library(Path({str(model_path)!r}), EngineConfig())\n"
        "print('llama_cpp' in sys.modules)"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "False"


def test_the_progress_callback_type_is_spelled_once():
    spelled = [path.relative_to(REPO).as_posix() for path in WORKER.rglob("*.py")
               if "Callable[[str, int, int], None]" in path.read_text()]
    assert spelled == ["worker/progress.py"]


def test_no_dict_literal_repeats_a_key():
    """A repeated key keeps its last value silently (the pre-tokenizer table had two)."""
    for path in WORKER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = Counter(k.value for k in node.keys if isinstance(k, ast.Constant))
                assert [k for k, n in keys.items() if n > 1] == [], path


def test_library_logs_come_out_as_our_events():
    run = _python(
        "import logging\n"
        "from worker.logs import configure\n"
        "configure('json', 'info')\n"
        "hub = logging.getLogger('huggingface_hub.file_download')\n"
        "hub.warning('Trying to resume download...\\n  (attempt %d)', 2)\n"
        "hub.debug('below the level')\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    hub.exception('failed')\n"
    )
    lines = [json.loads(line) for line in run.stderr.splitlines()]
    assert [line["event"] for line in lines] == ["Trying to resume download... (attempt 2)", "failed"]
    assert all(line["logger"] == "huggingface_hub.file_download" and line["timestamp"].endswith("Z") for line in lines)
    assert [line["level"] for line in lines] == ["warning", "error"]
    assert "ZeroDivisionError" in lines[1]["exception"]


async def test_metrics_come_from_prometheus_clients_own_handler(http, base_url):
    """It negotiates what a scraper asks for: OpenMetrics and gzip."""
    headers = {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"}
    async with http.get(base_url + "/metrics", headers=headers) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert response.headers["Content-Encoding"] == "gzip"
        text = await response.text()
    assert "llm_worker_requests_running" in text and text.endswith("# EOF\n")
    async with http.get(base_url + "/metrics") as response:
        assert response.headers["Content-Type"].startswith("text/plain")
