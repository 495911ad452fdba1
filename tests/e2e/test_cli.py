"""The command line: version, help (a line a command, serve's options in sections), env vars, startup failures."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, start_worker
from tests.helpers import openai_once


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-m", "worker", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("llm-worker, version ")


def test_serve_help_names_every_flag_and_its_env_var():
    out = run_cli("serve", "--help").stdout
    for flag in ("--model", "--backend", "--host", "--port", "--ctx-size", "--n-gpu-layers", "--threads",
                 "--worker-id", "--model-ref", "--callback-url", "--log-format", "--log-level", "--parallel"):
        assert flag in out
    assert "LLM_WORKER_MODEL" in out and "LLM_WORKER_CTX_SIZE" in out


def test_help_lists_each_command_on_one_line():
    from worker.cli import cli

    out = run_cli("--help").stdout
    rows = out.split("Commands:\n")[1].splitlines()
    assert [row.split()[0] for row in rows] == list(cli.commands)  # one row each, in the order a user meets them
    assert not [row for row in rows if row.endswith("...")]  # none cut short


def test_serve_help_groups_its_options_in_the_order_a_user_needs_them():
    from worker.cli import SERVE_SECTIONS, serve

    out = run_cli("serve", "--help").stdout
    titles = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles == [*SERVE_SECTIONS, "Other options"], titles
    other = out.split("Other options:\n")[1]
    assert other.split() == ["-h,", "--help", "Show", "this", "message", "and", "exit."]  # every flag has a section
    sections = {param.name: param.section for param in serve.params if param.name != "help"}
    assert set(sections.values()) == set(SERVE_SECTIONS)
    assert sections["model"] == "Model" and sections["backend"] == "Backend" and sections["worker_id"] == "Pool manager"


def one_line_failure(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("llm-worker: error: ")
    return line


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory, model_path: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad")
    truncated = folder / "truncated.gguf"
    truncated.write_bytes(model_path.read_bytes()[: 5_000_000])
    text = folder / "notes.gguf"
    text.write_text("this is not a model\n")
    return {"missing": folder / "missing.gguf", "truncated": truncated, "text": text}


@pytest.mark.parametrize("kind,expected", [
    ("missing", "neither a file nor a models.toml alias"),
    ("truncated", "cannot load model"),
    ("text", "is not a GGUF file"),
])
def test_bad_model_fails_with_one_line(bad_models, kind, expected):
    line = one_line_failure(run_cli("serve", "--port", "0", "--model", str(bad_models[kind])))
    assert expected in line


def test_missing_backend_names_the_ones_the_build_has():
    line = one_line_failure(run_cli("serve", "--port", "0", "--backend", "cuda"))
    assert "backend 'cuda' is not in this llama.cpp build (it has: cpu" in line


def test_env_vars_configure_serve(tmp_path, model_path):
    worker = start_worker(tmp_path, env={"LLM_WORKER_MODEL": str(model_path), "LLM_WORKER_PARALLEL": "1",
                                         "LLM_WORKER_CTX_SIZE": "1024", "LLM_WORKER_MODEL_REF": "ref-1"})
    try:
        import json
        import urllib.request
        ready = json.load(urllib.request.urlopen(worker.url + "/v1/ready"))
        assert ready["slots"] == 1
        models = json.load(urllib.request.urlopen(worker.url + "/v1/models"))
        assert models["data"][0]["id"] == model_path.stem
    finally:
        assert worker.stop() == 0


@pytest.fixture(scope="module")
def templateless_model(tmp_path_factory, model_path: Path) -> Path:
    out = tmp_path_factory.mktemp("nochat") / "no-template.gguf"
    subprocess.run([str(Path(sys.executable).parent / "gguf-new-metadata"), "--force", "--remove-metadata",
                    "tokenizer.chat_template", str(model_path), str(out)], check=True, capture_output=True)
    return out


async def test_model_without_chat_template(http, tmp_path, templateless_model):
    worker = start_worker(tmp_path, "--model", str(templateless_model), "--parallel", "1", "--ctx-size", "1024")
    try:
        async with http.post(worker.url + "/v1/chat/completions",
                             json={"messages": [{"role": "user", "content": "Hi"}]}) as response:
            assert response.status == 400
            error = (await response.json())["error"]
        assert error["code"] == "chat_template" and "no chat template" in error["message"]
        body = await openai_once(http, worker.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 4})
        assert body["usage"]["completion_tokens"] == 4
    finally:
        assert worker.stop() == 0


def test_unsupported_architecture_fails_with_one_line(tmp_path):
    import gguf

    path = tmp_path / "alien.gguf"
    writer = gguf.GGUFWriter(str(path), "alien-arch")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    line = one_line_failure(run_cli("serve", "--port", "0", "--model", str(path)))
    assert "cannot load model" in line and "alien-arch" in line
