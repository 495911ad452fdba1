"""The examples of README.md and docs/api.md, run against a real worker, so that none can drift from the code.

Every `curl` command of a ```sh block and every ```python block runs, with the docs' `localhost:8080` pointed at
a test worker started as `make serve` starts it; what needs a download, a registry or a GPU (`make`, `llm-worker
serve`, `docker`) is only parsed (tests/unit/test_examples.py, with the docs' links). Each example's answer is held
to what its request asks for: its status, and the fields that request must produce.
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.adapters import ZEBRA, Base, steering_adapter
from tests.conftest import WorkerProcess, start_worker
from tests.examples_helpers import CURLS, EXAMPLE_HOST, PYTHON_BLOCKS, Block, make_serve_flags
from tests.vision_helpers import COLOURS, IMAGE_TOKENS, QUESTION, build_projector, png
from worker.source import load_registry

# Nothing may hang the suite; the status is written after the body, on a line of its own.
CURL = "curl --silent --show-error --max-time 120 --write-out '\\n%{http_code}' "
EXAMPLE_TIMEOUT_S = 180
MODEL = load_registry().default  # what `make serve` serves, by the id the routes answer with
# make serve's slots: --parallel's default 4, sharing the model's 8192-token training context (docs/api.md's /props).
SLOTS, CTX_PER_SLOT = 4, 2048


@pytest.fixture(scope="module")
def example_files(model_path: Path, adapter_base: Base, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the pages name: the test projector for api.md's image example (tests/vision_helpers.py) and a LoRA
    adapter under which the model writes " zebra" at every step (made from its own weights: bench/adapters.py)."""
    folder = tmp_path_factory.mktemp("examples")
    build_projector(model_path, folder / "mmproj-colours.gguf")
    steering_adapter(adapter_base, ZEBRA, folder / "my-adapter.gguf")
    return folder


@pytest.fixture(scope="module")
def served(example_files: Path):
    """`make serve`'s worker, with the two flags api.md names for its embeddings and image examples: they add a
    route and an input, and change no other example's answer."""
    worker = start_worker(example_files, *make_serve_flags(), "--embeddings",
                          "--mmproj", str(example_files / "mmproj-colours.gguf"))
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


@pytest.fixture(scope="module")
def served_with_adapter(example_files: Path):
    """`make serve`'s worker started with `--lora ./my-adapter.gguf`, as the adapter examples say: a worker of its
    own, since the adapter applies to every request that names none and would answer the other examples too."""
    worker = start_worker(example_files, *make_serve_flags(), "--lora", str(example_files / "my-adapter.gguf"))
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


def at(worker: WorkerProcess, text: str) -> str:
    return text.replace(EXAMPLE_HOST, worker.url.removeprefix("http://"))


@dataclass(frozen=True)
class Reply:
    body: str
    worker: WorkerProcess

    def json(self):
        return json.loads(self.body)

    def events(self) -> list:
        """A server-sent stream's data payloads, up to its `[DONE]`, which must end it."""
        data = [line.removeprefix("data: ") for line in self.body.splitlines() if line.startswith("data: ")]
        assert data and data[-1] == "[DONE]", self.body[-2000:]
        return [json.loads(payload) for payload in data[:-1]]


def check_chat(request: dict, reply: Reply) -> None:
    if request.get("stream"):
        chunks = reply.events()
        assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}, chunks
        text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
        finish = chunks[-1]["choices"][0]["finish_reason"]
    else:
        answer = reply.json()
        assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["role"] == "assistant"
        text, finish = answer["choices"][0]["message"]["content"], answer["choices"][0]["finish_reason"]
        assert 0 < answer["usage"]["completion_tokens"] <= request["max_tokens"], answer["usage"]
    assert text.strip() and finish in ("stop", "length"), (text, finish)


def check_completion(request: dict, reply: Reply) -> None:
    answer = reply.json()
    [choice] = answer["choices"]
    tokens = answer["usage"]["completion_tokens"]
    assert answer["object"] == "text_completion" and 0 < tokens <= request["max_tokens"], answer
    if "logprobs" in request:  # each token with its own and the request's number of alternatives
        logprobs = choice["logprobs"]
        assert "".join(logprobs["tokens"]) == choice["text"] and len(logprobs["tokens"]) == tokens, logprobs
        assert all(len(top) == request["logprobs"] for top in logprobs["top_logprobs"]), logprobs
    if request.get("lora") == [{"id": 0, "scale": 1.0}]:  # the adapter at full scale writes its word at every step
        assert choice["text"] == " zebra" * tokens, choice
    else:
        assert choice["text"].strip() and "zebra" not in choice["text"], choice


def check_models(_: None, reply: Reply) -> None:
    """The one model, reading images with the projector."""
    models = reply.json()["data"]
    assert [(m["id"], m["input_modalities"]) for m in models] == [(MODEL, ["text", "image"])], models


def check_messages(request: dict, reply: Reply) -> None:
    message = reply.json()
    assert (message["type"], message["role"], message["model"]) == ("message", "assistant", MODEL), message
    assert [block["type"] for block in message["content"]] == ["text"] and message["content"][0]["text"].strip()
    assert 0 < message["usage"]["output_tokens"] <= request["max_tokens"], message["usage"]


def check_execute(request: dict, reply: Reply) -> None:
    """The pool-manager contract's events: started, a token event each, metrics, and the end that counts them."""
    events = reply.events()
    assert (events[0]["type"], events[0]["job_id"]) == ("started", request["job_id"]), events[0]
    tokens = [event for event in events if event["type"] == "token"]
    assert [event["i"] for event in tokens] == list(range(len(tokens))) and tokens, events
    end = events[-1]
    assert end["type"] == "end" and end["tokens_out"] == len(tokens) <= request["max_tokens"], events
    assert end["stop_reason"] in ("EOS", "MAX_TOKENS"), end  # the request sets no stop sequence


def check_cancel(request: dict, reply: Reply) -> None:
    assert reply.json()["job_id"] == request["job_id"], reply.body


def check_tokenize(request: dict, reply: Reply) -> None:
    tokens = reply.json()["tokens"]
    assert "".join(token["piece"] for token in tokens) == request["content"], tokens
    assert all(isinstance(token["id"], int) for token in tokens), tokens


def check_template(request: dict, reply: Reply) -> None:
    prompt = reply.json()["prompt"]
    assert all(message["content"] in prompt for message in request["messages"]), prompt


def check_slots(_: None, reply: Reply) -> None:
    slots = reply.json()
    assert [(slot["id"], slot["n_ctx"]) for slot in slots] == [(i, CTX_PER_SLOT) for i in range(SLOTS)], slots


def check_embeddings(request: dict, reply: Reply) -> None:
    data = reply.json()["data"]
    assert [item["index"] for item in data] == list(range(len(request["input"]))), data
    vectors = [item["embedding"] for item in data]
    assert len({len(vector) for vector in vectors}) == 1 and vectors[0] != vectors[1]


def check_rerank(request: dict, reply: Reply) -> None:
    """Every document, or the top_n, each once, best first."""
    results = reply.json()["results"]
    assert len(results) == request.get("top_n", len(request["documents"])), results
    assert len({r["index"] for r in results}) == len(results) <= len(request["documents"]), results
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True), results


def check_adapters(request: list | None, reply: Reply) -> None:
    if request is None:
        assert [(a["id"], a["name"]) for a in reply.json()] == [(0, "my-adapter")], reply.body
        return
    # Set for the requests that follow: the list says the new scale.
    assert reply.json() == {"success": True}, reply.body
    with urllib.request.urlopen(reply.worker.url + "/lora-adapters", timeout=60) as response:
        listed = json.load(response)
    assert [(a["id"], a["scale"]) for a in listed] == [(s["id"], s["scale"]) for s in request], listed


def check_props(_: None, reply: Reply) -> None:
    props = reply.json()
    settings = props["default_generation_settings"]
    assert (props["model_alias"], props["total_slots"], settings["n_ctx"]) == (MODEL, SLOTS, CTX_PER_SLOT), props
    # The default model's models.toml sampling (its entry: temperature 0.2, top_p 0.9).
    assert (settings["params"]["temperature"], settings["params"]["top_p"]) == (0.2, 0.9), settings["params"]


# Each route an example calls, the status it answers with and what its answer must hold. An example on a route not
# listed here fails until it is: nothing runs unchecked.
CHECKS: dict[str, tuple[int, Callable]] = {
    "/v1/chat/completions": (200, check_chat), "/v1/completions": (200, check_completion),
    "/v1/models": (200, check_models), "/v1/messages": (200, check_messages), "/execute": (200, check_execute),
    "/cancel": (202, check_cancel),  # 202 whether or not the job still runs (api.md)
    "/tokenize": (200, check_tokenize), "/apply-template": (200, check_template), "/slots": (200, check_slots),
    "/v1/embeddings": (200, check_embeddings), "/v1/rerank": (200, check_rerank),
    "/lora-adapters": (200, check_adapters), "/props": (200, check_props),
}


def route_and_body(command: str) -> tuple[str, object]:
    """The path a curl example calls, and its -d body as JSON (None without one)."""
    words = shlex.split(command)
    [url] = [word for word in words if EXAMPLE_HOST in word]
    body = words[words.index("-d") + 1] if "-d" in words else None
    return url.split(EXAMPLE_HOST, 1)[1], None if body is None else json.loads(body)


def needs_adapter(path: str, body: object) -> bool:
    return path == "/lora-adapters" or (isinstance(body, dict) and "lora" in body)


@pytest.mark.parametrize("block,command", CURLS, ids=[f"{b.name}:{c.split()[-1][:40]}" for b, c in CURLS])
def test_curl_example(request: pytest.FixtureRequest, block: Block, command: str):
    path, body = route_and_body(command)
    assert path in CHECKS, f"{block.name}: {command}: no check for {path} in CHECKS"
    worker = request.getfixturevalue("served_with_adapter" if needs_adapter(path, body) else "served")
    result = subprocess.run(["bash", "-c", CURL + at(worker, command).removeprefix("curl ")], capture_output=True,
                            text=True, timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, f"{block.name}: {command}\n{result.stderr[-2000:]}"
    text, _, status = result.stdout.rpartition("\n")
    expected, check = CHECKS[path]
    assert int(status) == expected, f"{block.name}: {command}\n{text[-2000:]}"
    check(body, Reply(text, worker))


def check_printed_text(block: Block, stdout: str, worker: WorkerProcess) -> None:
    """A streamed answer, printed as it comes."""
    assert stdout.strip(), "printed nothing"


def check_city(block: Block, stdout: str, worker: WorkerProcess) -> None:
    """The schema's object, printed as the dict json.loads made of it."""
    city = ast.literal_eval(stdout.strip())
    assert set(city) == {"city", "population"}, city
    assert isinstance(city["city"], str) and len(city["city"]) <= 20, city
    assert isinstance(city["population"], int) and city["population"] >= 0, city


def check_image_read(block: Block, stdout: str, worker: WorkerProcess) -> None:
    """The picture reached the prompt: the worker logged the example's request (its last) with the image's tokens
    beside the same question's without it. The example samples at the model's temperature 0.2, so what its answer
    says is not held here: the colour named at temperature 0 is tests/e2e/test_vision.py's."""
    assert stdout.strip(), "printed nothing"
    assert QUESTION in block.text
    [*_, done] = [json.loads(line) for line in worker.log().splitlines() if '"request_done"' in line]
    request = urllib.request.Request(worker.url + "/v1/chat/completions", method="POST", data=json.dumps(
        {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 1}).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        text_only = json.load(response)["usage"]["prompt_tokens"]
    assert done["prompt_tokens"] == text_only + IMAGE_TOKENS, (done, text_only)


# What each python example prints, picked by what it calls (first match): one that matches none fails until its
# check is written.
PYTHON_CHECKS: list[tuple[str, Callable[[Block, str, WorkerProcess], None]]] = [
    ('"json_schema"', check_city), ('"image_url"', check_image_read),
    ("client.messages.stream(", check_printed_text), ("stream=True", check_printed_text),
]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.name for b in PYTHON_BLOCKS])
def test_python_example(served, block: Block, tmp_path: Path):
    check = next((check for marker, check in PYTHON_CHECKS if marker in block.text), None)
    assert check, f"{block.name}: no check in PYTHON_CHECKS for this example"
    script = tmp_path / "example.py"
    script.write_text(at(served, block.text))
    (tmp_path / "photo.png").write_bytes(png(COLOURS["blue"]))  # the picture the image example reads
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                            timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, f"{block.name}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    check(block, result.stdout, served)
