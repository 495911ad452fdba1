"""What a request leaves out, as the model means it: its models.toml entry's value, else its GGUF's general.sampling.*
key, else llama-server's default, field by field; said once in the log, by /props and by Ollama's /api/show."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gguf
import pytest
from gguf.scripts.gguf_new_metadata import MetadataDetails

from tests.conftest import WorkerProcess, start_worker
from tests.gguf_files import with_metadata
from tests.helpers import WHOLE_DISTRIBUTION, completion_text, openai_once

STORY = {"prompt": "Once upon a time", "max_tokens": 16}
# The README's streamed chat, with no sampling field (here whole, not streamed).
README_CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}
# The worker's default before models.toml, GGUF and llama-server's defaults: temperature 1 over the whole distribution.
BEFORE = {"temperature": 1.0, **WHOLE_DISTRIBUTION}


@pytest.fixture(scope="module")
def keyed(model_path: Path, tmp_path_factory) -> Path:
    """The test model whose GGUF asks for top-k 1 at temperature 1.5: its text is then the greedy text at any seed."""
    return with_metadata(model_path, tmp_path_factory.mktemp("keyed") / "keyed.gguf", {
        gguf.Keys.General.SAMPLING_TOP_K: MetadataDetails(gguf.GGUFValueType.INT32, 1),
        gguf.Keys.General.SAMPLING_TEMP: MetadataDetails(gguf.GGUFValueType.FLOAT32, 1.5)})


async def _texts(http, worker: WorkerProcess, **fields) -> list[str]:
    """The story's text at seeds 1, 2 and 3."""
    url = worker.url + "/v1/completions"
    return [completion_text(await openai_once(http, url, {**STORY, **fields, "seed": seed})) for seed in (1, 2, 3)]


async def _params(http, worker: WorkerProcess) -> dict:
    async with http.get(worker.url + "/props") as response:
        assert response.status == 200
        return (await response.json())["default_generation_settings"]["params"]


def _logged(worker: WorkerProcess) -> dict:
    [line] = [json.loads(line) for line in worker.log().splitlines() if '"sampling_defaults"' in line]
    return line


async def test_the_ggufs_sampling_keys_set_what_a_request_leaves_out(keyed, tmp_path, http):
    worker = start_worker(tmp_path, "--model", str(keyed), "--parallel", "1", "--ctx-size", "512")
    try:
        greedy = completion_text(await openai_once(http, worker.url + "/v1/completions", {**STORY, "temperature": 0}))
        assert await _texts(http, worker) == [greedy] * 3
        # A request that lifts the key's top-k samples at the GGUF's temperature: the seeds then tell.
        assert any(text != greedy for text in await _texts(http, worker, top_k=0))
        params = await _params(http, worker)
        assert (params["top_k"], params["temperature"], params["top_p"], params["min_p"]) == (1, 1.5, 0.95, 0.05)
        logged = _logged(worker)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    assert logged["top_k"] == {"value": 1, "from": "gguf"} and logged["temperature"] == {"value": 1.5, "from": "gguf"}
    assert logged["top_p"] == {"value": 0.95, "from": "llama-server"}


async def test_a_models_toml_entry_overrides_a_gguf_key_for_its_field_alone(keyed, tmp_path, http):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.keyed]\nsampling = {{ top_k = 0 }}\n[models.keyed.source]\nkind = "path"\n'
                      f'path = "{keyed}"\n')
    worker = start_worker(tmp_path, "--model", "keyed", "--models-file", str(models), "--parallel", "1",
                          "--ctx-size", "512")
    try:
        greedy = completion_text(await openai_once(http, worker.url + "/v1/completions", {**STORY, "temperature": 0}))
        assert any(text != greedy for text in await _texts(http, worker))  # no top-k 1 any more
        params = await _params(http, worker)
        assert (params["top_k"], params["temperature"]) == (0, 1.5)  # the entry's top_k; the GGUF's temperature
        logged = _logged(worker)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    assert logged["top_k"]["from"] == "models.toml" and logged["temperature"]["from"] == "gguf"


async def _not_words(http, base_url: str, text: str) -> list[str]:
    """The answer's words that the model's tokenizer does not spell as one token, capitalized or not: its BPE
    vocabulary has a token for each English word it saw often, and made-up words ("Sourously") take several."""
    found = []
    for word in re.findall(r"[A-Za-z]+", text):
        counts = []
        for spelling in {word, word.lower()}:
            async with http.post(base_url + "/tokenize", json={"content": " " + spelling}) as response:
                counts.append(len((await response.json())["tokens"]))
        if min(counts) > 1:
            found.append(word)
    return found


async def test_the_readme_chat_answers_in_words_on_the_default_model(http, base_url):
    """The README's curl, no sampling field: SmolLM2's card's temperature and top-p (models.toml) and llama-server's
    top-k and min-p keep a 135M model to a greeting in words. The same requests over the whole distribution at
    temperature 1 (the worker's default before) make words up: the check tells them apart."""
    url = base_url + "/v1/chat/completions"
    answers = [completion_text(await openai_once(http, url, {**README_CHAT, "seed": seed})) for seed in range(8)]
    for answer in answers:
        assert re.match(r"(Hello|Hi|Hey)\b", answer) and await _not_words(http, base_url, answer) == [], answer
    before = [completion_text(await openai_once(http, url, {**README_CHAT, **BEFORE, "seed": seed}))
              for seed in range(8)]
    assert any([await _not_words(http, base_url, answer) for answer in before]), before


async def test_props_and_show_say_the_defaults_a_request_starts_from(http, base_url):
    async with http.get(base_url + "/props") as response:
        props = await response.json()
    params = props["default_generation_settings"]["params"]
    # SmolLM2's card (models.toml), then llama-server's own.
    assert (params["temperature"], params["top_p"], params["top_k"], params["min_p"]) == (0.2, 0.9, 40, 0.05)
    assert params["samplers"] == ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                                  "temperature"]
    assert (params["mirostat"], params["dry_multiplier"], params["n_predict"]) == (0, 0.0, -1)
    assert props["default_generation_settings"]["n_ctx"] == 2048 and props["total_slots"] == 4
    assert props["chat_template"].startswith("{% for message in messages %}") and props["eos_token"] == "<|im_end|>"
    assert props["modalities"] == {"vision": False, "audio": False, "video": False}
    async with http.post(base_url + "/api/show", json={"model": "smollm2-135m-instruct"}) as response:
        parameters = (await response.json())["parameters"].splitlines()
    assert parameters == ["num_ctx 2048", "temperature 0.2", "top_k 40", "top_p 0.9", "min_p 0.05"]
