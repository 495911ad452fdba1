"""A models.toml entry's defaults reach the engine and the API: ctx_size, chat_template, sampling."""

from pathlib import Path

import pytest

from tests.conftest import start_worker
from tests.helpers import completion_text, openai_once


@pytest.fixture(scope="module")
def tuned(model_path: Path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tuned")
    models = folder / "models.toml"
    # The template ignores the conversation: its greedy answer shows whose template was used.
    models.write_text(f'''
[models.tuned]
ctx_size = 1024
chat_template = "The capital of France is"
sampling = {{ temperature = 0.0 }}
[models.tuned.source]
kind = "path"
path = "{model_path}"
''')
    worker = start_worker(folder, "--model", "tuned", "--models-file", str(models), "--parallel", "1")
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


def test_ctx_size_and_template_come_from_the_entry(tuned):
    assert '"n_ctx": 1024' in tuned.log() and '"chat_template": "models.toml"' in tuned.log()


async def test_the_entry_template_replaces_the_gguf_one(tuned, http):
    body = {"messages": [{"role": "user", "content": "Say something about dogs."}], "max_tokens": 3}
    result = await openai_once(http, tuned.url + "/v1/chat/completions", body)
    assert completion_text(result).startswith(" Paris")


async def test_default_sampling_applies_and_the_request_wins(tuned, http):
    url = tuned.url + "/v1/completions"
    body = {"prompt": "Once upon a time", "max_tokens": 16}
    greedy = completion_text(await openai_once(http, url, {**body, "temperature": 0}))
    assert [completion_text(await openai_once(http, url, body)) for _ in range(2)] == [greedy, greedy]
    hot = [completion_text(await openai_once(http, url, {**body, "temperature": 2.0, "seed": s})) for s in (1, 2, 3)]
    assert any(text != greedy for text in hot)


def test_an_explicit_ctx_size_beats_the_entry(tmp_path: Path, model_path: Path):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.tuned]\nctx_size = 1024\n[models.tuned.source]\nkind = "path"\npath = "{model_path}"\n')
    worker = start_worker(tmp_path, "--model", "tuned", "--models-file", str(models), "--parallel", "1",
                          "--ctx-size", "512")
    try:
        assert '"n_ctx": 512' in worker.log()
    finally:
        assert worker.stop() == 0
