"""Speculative decoding (--spec-type ngram|draft) never changes the text: greedy and seeded answers equal a worker
without drafts, alone and four at once, with prompts longer than a step's prefill; drafts are counted in logs,
/metrics and the pool-manager's end event; a draft model with another vocabulary is a startup error naming both.
The drafting rule alone, without a model: tests/unit/test_draft_rule.py."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import gguf
import pytest
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

from tests.conftest import REPO, WorkerProcess, start_worker
from tests.e2e.test_prefix_cache import conversations_beside_off
from tests.gguf_files import read_gguf
from tests.helpers import completion_text, execute, openai_once, openai_stream, wait_idle
from worker.engine.exactness.build_choice import LIB_PATH_ENV, default_dir
from worker.engine.startup.check_record import RECORDS_ENV

FLAGS = ("--parallel", "4", "--ctx-size", "8192")
# Answers that copy their prompt: code edits over this repository's own sources, each prompt ~300-550 tokens
# (more than one 256-token prefill chunk), and open-ended questions, where drafts are mostly rejected.
SOURCES = ("worker/engine/output/seeded_draw.py", "worker/engine/handle.py", "worker/timefmt.py",
           "worker/engine/speculative/prompt_lookup.py")
COPYING = [f"Quote the following code exactly:\n\n{(REPO / path).read_text()[:1400]}" for path in SOURCES]
OPEN_ENDED = ["Write a short story about a lighthouse keeper.", "List ten fruits and one fact about each."]
GREEDY = {"temperature": 0, "max_tokens": 120}
# The reference: the shared worker (--spec-type auto, which drafts by prompt lookup) with drafting off per request.
NO_DRAFTS = {"draft_max": 0}


def _ngram_worker(folder: Path):
    process = start_worker(folder, *FLAGS, "--spec-type", "ngram")
    yield process
    assert process.stop() == 0, process.log()[-3000:]


@pytest.fixture(scope="module")
def ngram_worker(tmp_path_factory: pytest.TempPathFactory):
    yield from _ngram_worker(tmp_path_factory.mktemp("ngram"))


@pytest.fixture(scope="module")
def without_drafts(base_url: str):
    """The reference texts: the shared worker's greedy answers with drafting off, each prompt asked once and alone.
    Greedy text in exact mode does not depend on what runs beside a request, so the four-at-once runs are held to
    the same answers, which asks that of them too."""
    known: dict[str, str] = {}

    async def reference(http: aiohttp.ClientSession, prompts: list[str]) -> list[str]:
        for prompt in prompts:
            if prompt not in known:
                [known[prompt]] = await answers(http, base_url, [prompt], False, **NO_DRAFTS)
        return [known[prompt] for prompt in prompts]

    return reference


async def answers(http: aiohttp.ClientSession, url: str, prompts: list[str], together: bool, **extra) -> list[str]:
    async def one(prompt: str) -> str:
        body = {"messages": [{"role": "user", "content": prompt}], **GREEDY, **extra}
        return completion_text(await openai_once(http, url + "/v1/chat/completions", body))

    if together:
        return list(await asyncio.gather(*(one(p) for p in prompts)))
    return [await one(p) for p in prompts]


async def draft_counters(http: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    async with http.get(url + "/metrics") as response:
        text = await response.text()
    value = lambda name: float(re.search(rf"^{name} (\S+)$", text, re.M)[1])  # noqa: E731
    return value("llm_worker_draft_tokens_total"), value("llm_worker_draft_accepted_tokens_total")


@pytest.mark.parametrize("together", [False, True], ids=["alone", "four-at-once"])
async def test_ngram_drafts_leave_greedy_text_unchanged(http, ngram_worker, without_drafts, together):
    prompts = COPYING + OPEN_ENDED
    before = await draft_counters(http, ngram_worker.url)
    drafted = await answers(http, ngram_worker.url, prompts, together)
    assert drafted == await without_drafts(http, prompts)
    after = await draft_counters(http, ngram_worker.url)
    assert after[0] > before[0] and after[1] > before[1], (before, after)  # drafts were made, and kept
    if not together:
        # And some rejected: the rejecting path ran too. Four at once, a step drafts only where every sequence's
        # draft pays at this machine's measured costs (draft_rule.py, plan_drafts), so how many are made and whether
        # one is rejected is the machine's (a CI run drafted 8 tokens there, all kept); the text is held either way.
        assert after[1] - before[1] < after[0] - before[0], (before, after)


async def test_seeded_sampling_draws_the_same_text_with_drafts(http, base_url, ngram_worker):
    """Each kept token is what the chain sampled from its row, one draw per token as without drafts."""
    body = {"temperature": 0.7, "seed": 1234, "max_tokens": 120}
    prompt = COPYING[0]
    ours = await answers(http, ngram_worker.url, [prompt], False, **body)
    assert ours == await answers(http, base_url, [prompt], False, **body, **NO_DRAFTS)


async def test_a_stop_string_inside_a_kept_draft_ends_the_answer_as_without_drafts(http, base_url, ngram_worker):
    """The runner keeps drafted tokens while each is what was sampled; a stop string is text, which only the step's
    update reads (core/step_update.py): found inside a kept draft, the answer ends there and the rows drawn past it
    are dropped as a rejected draft's are. Stops placed along a copied code block (where drafts run long): each
    answer, its token count and its next turn equal drafting off, and the log shows the rows past a stop dropped."""
    prompt = COPYING[0]
    [reference] = await answers(http, base_url, [prompt], False, **GREEDY, **NO_DRAFTS)
    stops = [stop for at in range(24, len(reference) - 8, 12) if reference.find(stop := reference[at:at + 5]) == at]
    assert len(stops) >= 4, reference
    dropped = ngram_worker.log().count("rows_past_the_end_dropped")

    async def turns(url: str, stop: str, **extra) -> list[tuple[str, str, int]]:
        messages, said = [{"role": "user", "content": prompt}], []
        for question in ("Again, the first line only.", None):
            body = {"messages": messages, **GREEDY, "stop": [stop], **extra}
            result = await openai_once(http, url + "/v1/chat/completions", body)
            choice = result["choices"][0]
            said.append((choice["message"]["content"], choice["finish_reason"], result["usage"]["completion_tokens"]))
            if question is not None:
                messages += [{"role": "assistant", "content": choice["message"]["content"]},
                             {"role": "user", "content": question}]
        return said

    for stop in stops:
        assert await turns(ngram_worker.url, stop) == await turns(base_url, stop, **NO_DRAFTS), stop
    assert ngram_worker.log().count("rows_past_the_end_dropped") > dropped  # (a stop fell inside a kept draft)


async def test_health_and_log_say_drafts_keep_the_text(http, ngram_worker):
    async with http.get(ngram_worker.url + "/health") as response:
        exactness = (await response.json())["exactness"]
    assert exactness["speculative"] == "ngram" and exactness["drafts_keep_text"] is True, exactness
    assert "drafts_may_change_text" not in ngram_worker.log()


async def test_the_default_drafts_by_prompt_lookup_where_drafts_keep_the_text(http, tmp_path):
    """--spec-type auto, the default: in exact mode on the cpu backend the load-time check confirms that drafted rows
    compute as one-token decodes, so a worker with the shared one's flags drafts, and copying answers keep drafted
    tokens. Its own worker, not the shared one: where a worker drafts depends on the acceptance it has learnt and the
    pass costs it re-timed under load (draft_rule.py), and the shared one's come from every test before this one (a
    run whose earlier tests had taught it little acceptance drafted 8 tokens and kept none). Every copying prompt, one
    after another, as a user's would come: one answer alone drafted once, had that token rejected and drafted no more
    (drafted 1, kept 0), where the acceptance a fresh worker learns from one answer was all it had. The same flags
    reuse the shared worker's check and pass costs (check_record.py): a start of about 2 s."""
    default = start_worker(tmp_path, *FLAGS)
    try:
        async with http.get(default.url + "/health") as response:
            exactness = (await response.json())["exactness"]
        assert exactness["speculative"] == "ngram" and exactness["drafts_keep_text"] is True, exactness
        before = await draft_counters(http, default.url)
        await answers(http, default.url, COPYING, False)
        after = await draft_counters(http, default.url)
    finally:
        stopped = default.stop()
    assert after[1] > before[1], (before, after)
    assert stopped == 0, default.log()[-3000:]


def test_the_default_drafts_none_in_fast_mode(tmp_path):
    """llama.cpp picks kernels by batch shape in fast mode, so a drafted row may compute differently: auto drafts none,
    and has nothing to warn about."""
    exactness, log = _health_and_log(start_worker(tmp_path, "--prefix-cache", "fast"))
    assert exactness["speculative"] == "none" and exactness["drafts_keep_text"] is None, exactness
    assert "drafts_may_change_text" not in log and "drafts_off" not in log


def test_the_default_stops_drafting_where_the_load_time_check_finds_rows_change_with_the_batch(quantized, tmp_path):
    """F16 weights on llama-cpp-python's own library (a plain pip install): its GEMM sums a row by the rows beside
    it, the load-time check finds so, and auto stops drafting before serving, saying why."""
    worker = start_worker(tmp_path, "--model", str(quantized("f16")), env={LIB_PATH_ENV: str(default_dir())})
    exactness, log = _health_and_log(worker)
    assert exactness["batch_invariant"] is False and exactness["library"] == "default", exactness
    assert exactness["speculative"] == "none" and exactness["drafts_keep_text"] is None, exactness
    assert "drafts_off" in log and "drafts_may_change_text" not in log


def _health_and_log(worker: WorkerProcess) -> tuple[dict, str]:
    try:
        with urllib.request.urlopen(worker.url + "/health") as response:
            return json.load(response)["exactness"], worker.log()
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


def crowd_the_last_core() -> list[subprocess.Popen]:
    """One spinning Python per core, all on the last: the kernel's balancer then queues a decode's threads together
    on the other cores, where a thread that spins at a barrier cost the one it waits for a scheduler tick per graph
    node (worker/engine/thread_waits.py): a one-row pass 2,970 ms, a worker's start over 3 minutes."""
    cores = sorted(os.sched_getaffinity(0))
    spin = f"import os; os.sched_setaffinity(0, {{{cores[-1]}}})\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in cores]


def _logged_at(log: str, marker: str) -> datetime:
    line = next(line for line in log.splitlines() if marker in line)
    return datetime.fromisoformat(json.loads(line)["timestamp"].replace("Z", "+00:00"))


async def test_a_worker_started_on_busy_cores_is_ready_in_seconds(http, tmp_path):
    """Every core busy, a decode's threads crowded onto one: /health answers 200 within 30 s of the model loading
    (the threads sleep at a barrier rather than spin out a tick; startup times its draft passes for at most 3 s and
    lists in /health those it left), and what it serves then is exact: with one slot, the same copying request again
    reuses the first one's cells, drafts or not, and answers the same text; once idle, every row count is timed and
    kept for the next start (those startup left, timed then). Nothing here depends on how busy the
    host is beside the test: whether drafts pay, and when passes are timed again, do (tests/unit/test_draft_rule.py
    holds the re-timing rule)."""
    busy = crowd_the_last_core()
    try:
        # its own records: the load-time check runs on the busy cores, not reused from an earlier worker's
        worker = start_worker(tmp_path, "--parallel", "1", "--ctx-size", "2048", env={RECORDS_ENV: str(tmp_path)})
        healthy_at = datetime.now(timezone.utc)
        with urllib.request.urlopen(worker.url + "/health") as response:
            untimed = json.load(response)["untimed_pass_rows"]
    finally:
        for process in busy:
            process.kill()
            process.wait()
    try:
        log = worker.log()
        ready_in = (healthy_at - _logged_at(log, '"stage": "load", "done": 100')).total_seconds()
        assert ready_in < 30, log
        startup = json.loads(next(line for line in log.splitlines() if '"passes_timed"' in line))
        assert startup["untimed"] == untimed and not set(untimed) & {int(rows) for rows in startup["ms"]}, startup
        body = {"messages": [{"role": "user", "content": COPYING[1]}], **GREEDY}
        url = worker.url + "/v1/chat/completions"
        first = await openai_once(http, url, body)
        again = await openai_once(http, url, body)
        assert completion_text(again) == completion_text(first)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] - 32
        # Every row count timed, at load or once idle, and kept for the next start's reuse (check_record.py).
        for _ in range(600):
            async with http.get(worker.url + "/health") as response:
                untimed = (await response.json())["untimed_pass_rows"]
            if not untimed:
                break
            await asyncio.sleep(0.1)
        assert untimed == [] and list(tmp_path.glob("*.passes.json")), worker.log()[-3000:]
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


async def test_drafts_are_reported_per_request(http, ngram_worker):
    """request_done logs and the pool-manager's end event count drafted and accepted tokens; draft_max 0 drafts none.
    On the module's worker: its greedy acceptance is kept apart from the sampled requests' it served."""
    worker = ngram_worker

    def request_done() -> list[dict]:
        return [json.loads(line) for line in worker.log().splitlines() if '"request_done"' in line]

    # Whether a step drafts is the rule's call on the costs and acceptance it has measured: a copying prompt is sent
    # up to three times, and one of them must draft. A raw prompt, so one the model goes on copying without a chat
    # template: a source twice and the start of its third time (an instruction to quote, raw, was copied too little
    # to draft in 3 tries on a busy CI machine).
    source = (REPO / SOURCES[2]).read_text()[:900]
    repeating = f"{source}\n\n{source}\n\n{source[:200]}"
    ends = []
    for attempt in range(3):
        await wait_idle(http, worker.url)
        logged, counted = len(request_done()), await draft_counters(http, worker.url)
        events = await execute(http, worker.url, {"job_id": f"spec-{attempt}", "prompt": repeating,
                                                  "max_tokens": 100, "temperature": 0})
        end = next(e for e in events if isinstance(e, dict) and e.get("type") == "end")
        ends.append(end)
        # Accepted tokens are drafted tokens, each one an output token; every step also samples one of its own, so
        # they are fewer than the tokens out (core/runner.py: a step generates 1 + accepted).
        assert end["draft_accepted_tokens"] <= end["draft_tokens"], end
        assert end["draft_accepted_tokens"] < end["tokens_out"], end
        await answers(http, worker.url, [COPYING[1]], False, draft_max=0)
        # Counted and logged before the response's end: right after it, /metrics and the log have both requests, each
        # with its own counts (the draft_max 0 one none).
        assert [(d["draft_tokens"], d["draft_accepted"]) for d in request_done()[logged:]] == [
            (end["draft_tokens"], end["draft_accepted_tokens"]), (0, 0)]
        assert await draft_counters(http, worker.url) == (counted[0] + end["draft_tokens"],
                                                          counted[1] + end["draft_accepted_tokens"])
        if end["draft_accepted_tokens"] > 0:
            break
    timed = [line for line in worker.log().splitlines() if '"passes_timed"' in line]
    assert ends[-1]["draft_accepted_tokens"] > 0, (ends, timed)


async def test_draft_max_out_of_range_is_a_400(http, ngram_worker):
    async with http.post(ngram_worker.url + "/v1/chat/completions",
                         json={"messages": [{"role": "user", "content": "hi"}], "draft_max": 65}) as response:
        assert response.status == 400
        assert "draft_max" in await response.text()


async def test_cancelled_mid_draft_leaves_no_cell_reused_wrongly(http, ngram_worker):
    """A stream cut off while it drafts: its slot is freed, and the same prompt again answers as a cold worker."""
    body = {"messages": [{"role": "user", "content": COPYING[2]}], **GREEDY, "stream": True}
    for _ in range(3):
        async with http.post(ngram_worker.url + "/v1/chat/completions", json=body) as response:
            seen = 0
            async for line in response.content:
                seen += line.startswith(b"data:")
                if seen == 30:
                    break  # leaving the block closes the connection mid-stream
    full = await answers(http, ngram_worker.url, [COPYING[2]], False)
    streamed = await openai_stream(http, ngram_worker.url + "/v1/chat/completions", {**body, "stream": True})
    assert [streamed.text] == full
    assert (await wait_idle(http, ngram_worker.url))["running"] == 0


async def test_multi_turn_with_drafts_reuses_answers_and_equals_off(http, tmp_path, model_path, off_conversations):
    """The exact cache with drafting on: conversations side by side equal `off`, each turn past the last answer."""
    side = await conversations_beside_off(http, tmp_path, model_path, "--spec-type", "ngram", off=off_conversations)
    assert side.exactness["answers_reused"] is True and side.exactness["speculative"] == "ngram"


@pytest.fixture(scope="module")
def draft_worker(quantized, tmp_path_factory: pytest.TempPathFactory):
    """A draft model made from the test model itself: quantized to Q4_0, so the vocabulary is the same."""
    process = start_worker(tmp_path_factory.mktemp("draft"), *FLAGS, "--spec-type", "draft",
                           "--model-draft", str(quantized("q4_0")))
    yield process
    assert process.stop() == 0, process.log()[-3000:]


@pytest.mark.parametrize("together", [False, True], ids=["alone", "four-at-once"])
async def test_a_draft_model_leaves_greedy_text_unchanged(http, draft_worker, without_drafts, together):
    prompts = COPYING + OPEN_ENDED[:1]
    before = await draft_counters(http, draft_worker.url)
    drafted = await answers(http, draft_worker.url, prompts, together)
    assert drafted == await without_drafts(http, prompts)
    after = await draft_counters(http, draft_worker.url)
    assert after[1] > before[1], (before, after)


def another_vocabulary(model: Path, out: Path) -> Path:
    """The test model with two tokens' texts swapped: the same shapes, another vocabulary."""
    reader = read_gguf(model)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    tokens[1000], tokens[1001] = tokens[1001], tokens[1000]
    copy_with_new_metadata(reader, gguf.GGUFWriter(out, arch=arch, endianess=reader.endianess), {
        "tokenizer.ggml.tokens": MetadataDetails(gguf.GGUFValueType.ARRAY, tokens,
                                                 sub_type=gguf.GGUFValueType.STRING)}, [])
    return out


def test_a_draft_model_with_another_vocabulary_is_a_startup_error(model_path, tmp_path):
    other = another_vocabulary(model_path, tmp_path / "other-vocab.gguf")
    worker: WorkerProcess = start_worker(tmp_path, "--spec-type", "draft", "--model-draft", str(other), wait=False)
    assert worker.process.wait(120) != 0
    lines = [line for line in worker.log().splitlines() if "vocabularies differ" in line]
    assert lines and "other-vocab.gguf" in lines[0] and model_path.name in lines[0], worker.log()[-2000:]
    assert "token 1000" in lines[0]


def test_spec_type_draft_needs_a_draft_model(tmp_path):
    worker = start_worker(tmp_path, "--spec-type", "draft", wait=False)
    assert worker.process.wait(60) != 0
    assert "--spec-type draft and --model-draft PATH go together" in worker.log()
