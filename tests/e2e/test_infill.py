"""Fill-in-the-middle: llama-server's /infill and OpenAI completions' suffix, on the test model given FIM tokens (a copy
whose GGUF names four of its control tokens prefix, suffix, middle and file separator): the prompt is llama-server's
layout, and the same text comes whichever route asks, streamed or not, cached or not."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from gguf.scripts.gguf_new_metadata import MetadataDetails

from tests.conftest import start_worker
from tests.gguf_files import with_metadata
from tests.helpers import completion_text, openai_once, sse_events

# Control tokens of the test model's vocabulary stand in for a code model's FIM tokens; llama.cpp finds its repo
# token (<reponame>) by its text.
FIM = {gguf.Keys.Tokenizer.FIM_PRE_ID: 8, gguf.Keys.Tokenizer.FIM_SUF_ID: 9, gguf.Keys.Tokenizer.FIM_MID_ID: 10,
       gguf.Keys.Tokenizer.FIM_SEP_ID: 5}
PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
GREEDY = {"temperature": 0, "max_tokens": 12}


@pytest.fixture(scope="module")
def fim_worker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("fim")
    model = with_metadata(model_path, tmp / "fim.gguf", {
        key: MetadataDetails(gguf.GGUFValueType.UINT32, token) for key, token in FIM.items()})
    worker = start_worker(tmp, "--model", str(model), "--parallel", "2")
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


async def _tokens(http, url: str, text: str) -> list[int]:
    async with http.post(url + "/tokenize", json={"content": text, "parse_special": False}) as response:
        return (await response.json())["tokens"]


async def _layout(http, url: str, prefix: str, suffix: str, files: list[tuple[str, str]] = (), middle: str = ""):
    """llama-server's FIM prompt, token by token: [REP]myproject [SEP]file text ... [SEP]filename [PRE]prefix middle
    [SUF]suffix [MID] (the test model asks for no BOS)."""
    tokens = [4, *await _tokens(http, url, "myproject\n")]
    for filename, text in files:
        tokens += [5, *await _tokens(http, url, filename + "\n"), *await _tokens(http, url, text)]
    tokens += [5, *await _tokens(http, url, "filename\n"), 8, *await _tokens(http, url, prefix)]
    tokens += [*(await _tokens(http, url, middle) if middle else []), 9, *await _tokens(http, url, suffix), 10]
    return tokens


async def test_the_prompt_is_llama_servers_layout(fim_worker, http):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "a",
            "input_extra": [{"filename": "util.py", "text": "X = 1\n"}], "n_predict": 4, "temperature": 0}
    async with http.post(fim_worker.url + "/infill", json=body) as response:
        assert response.status == 200, await response.text()
        answer = await response.json()
    assert answer["prompt"] == ("<reponame>myproject\n<file_sep>util.py\nX = 1\n<file_sep>filename\n"
                                f"<issue_start>{PREFIX}a<issue_comment>{SUFFIX}<issue_closed>")
    assert answer["stop"] and answer["stop_type"] in ("eos", "limit") and answer["tokens_predicted"] <= 4
    layout = await _layout(http, fim_worker.url, PREFIX, SUFFIX, [("util.py", "X = 1\n")], "a")
    assert answer["tokens_evaluated"] == len(layout)


async def test_infill_and_completions_suffix_write_the_same_middle(fim_worker, http):
    infill = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12, "temperature": 0}
    async with http.post(fim_worker.url + "/infill", json=infill) as response:
        answer = await response.json()
    suffixed = await openai_once(http, fim_worker.url + "/v1/completions",
                                 {"prompt": PREFIX, "suffix": SUFFIX, **GREEDY})
    # The same prompt as token ids: the same request, whatever its cells' history (the first two filled the cache).
    ids = await _layout(http, fim_worker.url, PREFIX, SUFFIX)
    as_ids = await openai_once(http, fim_worker.url + "/v1/completions", {"prompt": ids, **GREEDY})
    assert answer["content"] == completion_text(suffixed) == completion_text(as_ids)
    async with http.post(fim_worker.url + "/infill", json={**infill, "stream": True}) as response:
        events = await sse_events(response)
    assert "".join(event["content"] for event in events) == answer["content"] and events[-1]["stop"]


async def test_a_model_without_fim_tokens_is_a_400_naming_the_field(base_url, http):
    async with http.post(base_url + "/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX}) as response:
        assert response.status == 400
        [problem] = (await response.json())["error"]["errors"]
    assert problem["field"] == "input_prefix" and "fill-in-the-middle" in problem["message"]
    async with http.post(base_url + "/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX}) as response:
        assert response.status == 400 and (await response.json())["error"]["param"] == "suffix"


async def test_bad_infill_bodies_list_every_problem(fim_worker, http):
    body = {"input_suffix": 3, "input_extra": [{"filename": "a.py"}], "temperature": 9}
    async with http.post(fim_worker.url + "/infill", json=body) as response:
        assert response.status == 400
        fields = sorted(problem["field"] for problem in (await response.json())["error"]["errors"])
    assert fields == ["input_extra[0].text", "input_prefix", "input_suffix", "temperature"]
