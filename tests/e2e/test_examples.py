"""The examples of README.md and docs/api.md, run against a real worker, so that none can drift from the code.

Every `curl` command of a ```sh block and every ```python block runs, with the docs' `localhost:8080` pointed at
the test worker; what needs a download, a registry or a GPU (`make`, `llm-worker serve`, `docker`) is only parsed
(tests/unit/test_examples.py, with the docs' links).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.adapters import ZEBRA, Base, steering_adapter
from tests.conftest import start_worker
from tests.examples_helpers import CURLS, EXAMPLE_HOST, PYTHON_BLOCKS, Block
from tests.vision_helpers import COLOURS, build_projector, png

# An HTTP error fails the example (plain curl exits 0 on a 400); nothing may hang the suite.
CURL_STRICT = "curl --fail-with-body --silent --show-error --max-time 120 "
EXAMPLE_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def example_worker(model_path: Path, adapter_base: Base, tmp_path_factory: pytest.TempPathFactory):
    """The default model as `make serve` serves it, plus --embeddings for api.md's embeddings example, the test
    projector for api.md's image example (tests/vision_helpers.py) and a LoRA adapter (one made from the
    model's own weights: bench/adapters.py) for the adapter examples."""
    folder = tmp_path_factory.mktemp("examples")
    projector = build_projector(model_path, folder / "mmproj-colours.gguf")
    adapter = steering_adapter(adapter_base, ZEBRA, folder / "my-adapter.gguf")
    worker = start_worker(folder, "--embeddings", "--parallel", "4", "--ctx-size", "8192", "--mmproj", str(projector),
                          "--lora", str(adapter))
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


def at(worker, text: str) -> str:
    return text.replace(EXAMPLE_HOST, worker.url.removeprefix("http://"))


@pytest.mark.parametrize("block,command", CURLS, ids=[f"{b.name}:{c.split()[-1][:40]}" for b, c in CURLS])
def test_curl_example(example_worker, block: Block, command: str):
    strict = CURL_STRICT + at(example_worker, command).removeprefix("curl ")
    result = subprocess.run(["bash", "-c", strict], capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, f"{block.name}: {command}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    assert result.stdout.strip(), f"{block.name}: {command} printed nothing"


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.name for b in PYTHON_BLOCKS])
def test_python_example(example_worker, block: Block, tmp_path: Path):
    script = tmp_path / "example.py"
    script.write_text(at(example_worker, block.text))
    (tmp_path / "photo.png").write_bytes(png(COLOURS["blue"]))  # the picture the image example reads
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                            timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, f"{block.name}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    assert result.stdout.strip(), f"{block.name} printed nothing"
