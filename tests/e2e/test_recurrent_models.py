"""Models whose memory is not all attention cells, served as the test model is: recurrent (Mamba) and hybrid
(LFM2, Qwen3.5, Nemotron-H) ones, a mixture of experts and sliding-window attention, each tiny and written by the
tests (tests/fixtures/tiny_arch_models.py). Every answer a 200 and bitwise what --prefix-cache off answers, a chat's
later turns reused through checkpoints, drafts undone where the memory keeps snapshots."""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.conftest import WorkerProcess, start_worker
from tests.fixtures.tiny_arch_models import HYBRID_KINDS, RECURRENT_KINDS, write_tiny_model

SYSTEM = "You are a careful assistant who answers in plain sentences. " * 8
T = TypeVar("T")
A = TypeVar("A", bound=tuple)
MEMORY = {"mamba": "whole", "lfm2": "last-tokens", "qwen35": "last-tokens", "nemotron_h": "last-tokens",
          "qwen3moe": "anywhere", "gemma3": "anywhere"}


@pytest.fixture(scope="module")
def tiny(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("tiny-archs")
    written: dict[str, Path] = {}

    def model(kind: str, quant: str | None = None) -> Path:
        name = f"{kind}-{quant}" if quant else kind
        if name not in written:
            written[name] = write_tiny_model(kind, folder / f"{name}.gguf", model_path, quant=quant)
        return written[name]

    return model


@pytest.fixture(scope="module")
def off_worker(tiny, tmp_path_factory: pytest.TempPathFactory):
    """The reference each tiny model's exact text is held to: --prefix-cache off, one worker per model for the whole
    module, as conftest's worker_off is for the test model. Its greedy text depends on neither --parallel, --ctx-size
    nor what it served before (every prompt prefilled whole into a cleared slot), and it reuses nothing."""
    started: dict[str, WorkerProcess] = {}

    def worker(kind: str) -> WorkerProcess:
        if kind not in started:
            started[kind] = start_worker(tmp_path_factory.mktemp(f"off-{kind}"), "--model", str(tiny(kind)),
                                         *_mode("off"), "--parallel", "2", "--ctx-size", "4096")
        return started[kind]

    yield worker
    for running in started.values():
        assert running.stop() == 0, running.log()[-3000:]


def _mode(mode: str) -> tuple[str, ...]:
    """The flags of a --prefix-cache mode; the `off` reference decodes one token a step (--spec-type auto would draft
    there too, and a draft that changed the text would then change both sides alike)."""
    return ("--prefix-cache", mode, *(("--spec-type", "none") if mode == "off" else ()))


def _post(worker: WorkerProcess, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(worker.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read() or b"{}")


def _chat(worker: WorkerProcess, messages: list[dict], n: int = 1, **fields) -> tuple[int, dict]:
    return _post(worker, "/v1/chat/completions", {"messages": messages, "max_tokens": 32, "temperature": 0, "n": n,
                                                   **fields})


def _answer_and_cached(worker: WorkerProcess, messages: list[dict]) -> tuple[str, int]:
    status, body = _chat(worker, messages)
    assert status == 200, body
    return body["choices"][0]["message"]["content"], body["usage"]["prompt_tokens_details"]["cached_tokens"]




def _workload(worker: WorkerProcess) -> tuple[list[str], list[int], list[tuple[int, int]]]:
    """A five-turn chat that resends its history, a request for two choices, three requests at once that share the
    chat's beginning: each answer's text, each status, and each chat turn's (prompt, cached) tokens."""
    texts, statuses, reuse = [], [], []
    messages = [{"role": "system", "content": SYSTEM}]
    for turn in range(5):
        messages.append({"role": "user", "content": f"Say something about the number {turn}, at some length."})
        status, body = _chat(worker, messages)
        statuses.append(status)
        answer = body["choices"][0]["message"]["content"] if status == 200 else ""
        usage = body.get("usage", {})
        reuse.append((usage.get("prompt_tokens", 0), (usage.get("prompt_tokens_details") or {}).get("cached_tokens")))
        texts.append(answer)
        messages.append({"role": "assistant", "content": answer})
    status, body = _chat(worker, messages[:2], n=2)
    statuses.append(status)
    texts.extend(choice["message"]["content"] for choice in body.get("choices", []))
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for status, body in pool.map(lambda k: _chat(worker, messages[:k]), (2, 4, 6)):
            statuses.append(status)
            texts.append(body["choices"][0]["message"]["content"] if status == 200 else "")
    return texts, statuses, reuse


def _on_a_worker(tmp_path: Path, ask: Callable[[WorkerProcess], T], *flags: str) -> T:
    """What `ask` gets from a worker started with `flags` for it alone, and stopped cleanly after."""
    worker = start_worker(tmp_path, *flags)
    try:
        return ask(worker)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


def _held_to_off(tmp_path: Path, off: WorkerProcess, ask: Callable[[WorkerProcess], A], *flags: str) -> A:
    """What `ask` gets, (text, cached tokens, ...), from an exact-mode worker started with `flags` for it alone, held
    to what it gets from the shared off worker: the same text, and off reused nothing. Returns the exact answer."""
    exact = _on_a_worker(tmp_path, ask, *flags, *_mode("exact"))
    off_answer = ask(off)
    assert exact[0] == off_answer[0] and off_answer[1] == 0, (exact, off_answer)
    return exact


def _served(tmp_path: Path, model: Path, mode: str) -> tuple[dict, tuple]:
    def exactness_and_workload(worker: WorkerProcess) -> tuple[dict, tuple]:
        with urllib.request.urlopen(worker.url + "/health", timeout=10) as response:
            exactness = json.load(response)["exactness"]
        return exactness, _workload(worker)

    return _on_a_worker(tmp_path, exactness_and_workload, "--model", str(model), *_mode(mode), "--parallel", "2",
                        "--ctx-size", "4096")


@pytest.mark.parametrize("kind", [*RECURRENT_KINDS, *HYBRID_KINDS, "qwen3moe", "gemma3"])
def test_chat_n_and_overlapping_requests_answer_as_off_does(tiny, off_worker, tmp_path, kind):
    """Exact mode's default flags (drafts on where they keep the text): every request a 200, every text off's, and
    the chat's last turn starts from most of its history (kept cells, or a checkpoint of the recurrent state)."""
    exactness, (texts, statuses, reuse) = _served(tmp_path, tiny(kind), "exact")
    off_texts, off_statuses, _ = _workload(off_worker(kind))
    assert exactness["memory"] == MEMORY[kind]
    # The load-time check, recurrent kernels and a mixture of experts' mul_mat_id included: rows ignore their batch,
    # and an answer's cells and state are what a prefill makes.
    assert exactness["batch_invariant"] is True and exactness["decoded_cells_exact"] is True, exactness
    assert statuses == off_statuses == [200] * 9
    assert texts == off_texts
    prompt, cached = reuse[-1]
    assert cached >= 0.8 * prompt, reuse


@pytest.mark.parametrize("kind", ["mamba", "lfm2"])
def test_fast_mode_reuses_and_answers_every_request(tiny, tmp_path, kind):
    _, (texts, statuses, reuse) = _served(tmp_path, tiny(kind), "fast")
    assert statuses == [200] * 9 and all(texts)
    assert reuse[-1][1] >= 0.8 * reuse[-1][0], reuse


@pytest.mark.parametrize("kind", ["lfm2", "mamba"])
def test_drafts_are_undone_and_keep_the_text(tiny, model_path, tmp_path, kind):
    """LFM2 keeps snapshots of its state (n_rs_seq): a rejected draft is rolled back through them. Mamba keeps none:
    its state is checkpointed before a draft is verified, and a rejected draft undone by going back there and
    decoding the kept tokens again. Either way the text is the one decoded without drafts: a state left wrong
    by an undone draft would change every token after it. The test model drafts (the same vocabulary), and a random
    model rejects its drafts, which is what must be undone; Q4_0 weights make a pass of a few rows cost about one
    row's, so that drafting pays on the tiny model."""
    def text_and_log(worker: WorkerProcess) -> tuple[str, str]:
        status, body = _post(worker, "/v1/completions", {"prompt": "one two three four five six seven eight",
                                                         "max_tokens": 64, "temperature": 0})
        assert status == 200, body
        return body["choices"][0]["text"], worker.log()

    texts, drafted = {}, {}
    for spec in (("--spec-type", "draft", "--model-draft", str(model_path)), ("--spec-type", "none")):
        texts[spec[1]], log = _on_a_worker(tmp_path, text_and_log, "--model", str(tiny(kind, "Q4_0")), *spec,
                                           "--parallel", "2")
        ends = [json.loads(line) for line in log.splitlines() if '"request_done"' in line]
        drafted[spec[1]] = (sum(end.get("draft_tokens", 0) for end in ends),
                            sum(end.get("draft_accepted_tokens", 0) for end in ends))
    assert texts["draft"] == texts["none"]
    assert drafted["draft"][0] > drafted["draft"][1] and drafted["none"] == (0, 0), drafted  # some rejected


def test_host_memory_keeps_a_conversation_with_its_checkpoints(tiny, off_worker, tmp_path):
    """One slot, two conversations in turn: the first one's cells go to host memory with its checkpoints when the
    second takes the slot, and its next turn goes on from a checkpoint there, as off answers it."""
    def two_conversations(worker: WorkerProcess) -> tuple[str, int]:
        first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me about rivers."}]
        other = [{"role": "user", "content": "A different question about mountains, please."}]
        _, body = _chat(worker, first)
        first += [{"role": "assistant", "content": body["choices"][0]["message"]["content"]},
                  {"role": "user", "content": "And about lakes?"}]
        assert _chat(worker, other)[0] == 200
        return _answer_and_cached(worker, first)

    assert _held_to_off(tmp_path, off_worker("qwen35"), two_conversations, "--model", str(tiny("qwen35")),
                        "--parallel", "1")[1] > 0


def test_kv_dir_brings_a_recurrent_state_back_whole(tiny, off_worker, tmp_path):
    """--kv-dir: the state a worker left is loaded by the next one, and a prompt that continues all of it goes on from
    it, with off's text."""
    prompt = SYSTEM + "Here is the question."
    kv_dir = tmp_path / "kv"
    kv_flags = ("--model", str(tiny("lfm2")), "--kv-dir", str(kv_dir))
    _on_a_worker(tmp_path, lambda first: _post(first, "/v1/completions", {"prompt": prompt, "max_tokens": 1}),
                 *kv_flags)

    def longer(worker: WorkerProcess) -> tuple[str, int]:
        status, body = _post(worker, "/v1/completions", {"prompt": prompt + " And a second one, much like it.",
                                                         "max_tokens": 24, "temperature": 0})
        assert status == 200, body
        return body["choices"][0]["text"], body["usage"]["prompt_tokens_details"]["cached_tokens"]

    assert _held_to_off(tmp_path, off_worker("lfm2"), longer, *kv_flags)[1] > 0


def test_kv_dir_keeps_a_conversations_checkpoints_across_a_restart(tiny, off_worker, tmp_path):
    """A conversation's cells and checkpoints written to --kv-dir on drain: the replacement worker takes its next
    turn from a checkpoint read from disk, with off's text."""
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me about rivers."}]
    kv_flags = ("--model", str(tiny("lfm2")), "--kv-dir", str(tmp_path / "kv"))
    status, body = _on_a_worker(tmp_path, lambda worker: _chat(worker, first), *kv_flags)
    assert status == 200, body
    following = [*first, {"role": "assistant", "content": body["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "And about lakes?"}]
    assert _held_to_off(tmp_path, off_worker("lfm2"), lambda worker: _answer_and_cached(worker, following),
                        *kv_flags)[1] > 0


@pytest.mark.parametrize("kind", ["mamba", "lfm2"])
def test_a_new_conversation_goes_on_from_a_shared_system_prompts_checkpoint(tiny, off_worker, tmp_path, kind):
    """The state is checkpointed where the system prompt ends: another conversation with the same system prompt
    starts from there (copied from the first one's slot), with off's text."""
    def two_conversations(worker: WorkerProcess) -> tuple[str, int, int]:
        assert _chat(worker, [{"role": "system", "content": SYSTEM},
                              {"role": "user", "content": "Tell me about rivers."}])[0] == 200
        status, body = _chat(worker, [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "Something else: mountains."}])
        assert status == 200, body
        return (body["choices"][0]["message"]["content"], body["usage"]["prompt_tokens_details"]["cached_tokens"],
                body["usage"]["prompt_tokens"])

    _, cached, prompt = _held_to_off(tmp_path, off_worker(kind), two_conversations, "--model", str(tiny(kind)),
                                     "--parallel", "2")
    assert cached >= prompt - 16, (cached, prompt)  # all of it but the user's message


@pytest.mark.parametrize("kind", ["mamba", "lfm2"])
def test_an_edited_last_message_goes_on_from_where_it_starts(tiny, off_worker, tmp_path, kind):
    """The state is checkpointed where a chat's last user message starts: the same chat with that message edited
    goes on from there, past the checkpoint of the turn before (4 tokens before its prompt's end), with off's text."""
    answer = "Rivers carry rain and snowmelt from high ground down to lakes and seas, cutting valleys as they go. " * 2
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me about rivers."}]
    history_and_answer = [*history, {"role": "assistant", "content": answer}]

    def edited(worker: WorkerProcess) -> tuple[str, int, int]:
        status, first = _chat(worker, history)
        assert status == 200, first
        assert _chat(worker, [*history_and_answer, {"role": "user", "content": "And lakes?"}])[0] == 200
        status, body = _chat(worker, [*history_and_answer, {"role": "user", "content": "And glaciers, then?"}])
        assert status == 200, body
        return (body["choices"][0]["message"]["content"], body["usage"]["prompt_tokens_details"]["cached_tokens"],
                first["usage"]["prompt_tokens"])

    _, cached, first_prompt = _held_to_off(tmp_path, off_worker(kind), edited, "--model", str(tiny(kind)),
                                           "--parallel", "1")
    assert cached > first_prompt + 20, (cached, first_prompt)  # past the first turn's prompt and answer
