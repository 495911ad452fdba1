"""The prefix cache: later turns reuse earlier KV, and greedy text never depends on it (--prefix-cache exact).

Every comparison is against a worker with `--prefix-cache off`, which prefills every prompt whole, and
against the same request sent alone; prompts are several chunks long so that reuse, chunk
boundaries and batching beside other requests all come into play.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import llama_cpp
import pytest

from tests.conftest import WorkerProcess, start_worker
from tests.conversations import GREEDY, QUESTIONS, SYSTEM, OffConversations, cached, converse
from tests.convert_helpers import oracle
from tests.fixtures.tiny_models import make_tiny
from tests.helpers import completion_text, execute, openai_once
from worker.engine.exactness.build_choice import LIB_PATH_ENV, default_dir
from worker.engine.kv.prefix_cache import ALIGN

LLAMAFILE = b"LLAMAFILE = 1" in llama_cpp.llama_print_system_info()

async def test_multi_turn_exact_equals_off_and_reuses_the_answers(http, base_url, off_conversations):
    """The default flags on the batch-invariant build: flash attention held to one kernel for every row makes an
    answer's cells bitwise what a prefill makes (the load-time check measures it), so each turn starts past the
    previous answer."""
    exact = [await converse(http, base_url, q) for q in QUESTIONS]
    off = [await off_conversations(http, q) for q in QUESTIONS]
    assert [[t["answer"] for t in c] for c in exact] == [[t["answer"] for t in c] for c in off]
    for conversation in exact:
        hits = cached(conversation)
        # Past the previous prompt, into the answer's decode-made cells (the block rule stops before the prompt's
        # end); how far depends on whether the answer's text tokenizes back into the tokens it was generated as.
        assert all(hit > prev["usage"]["prompt_tokens"] for prev, hit in zip(conversation, hits[1:])), hits
    assert all(hit == 0 for hit in cached(off[0]) + cached(off[1]))


@pytest.mark.skipif(not LLAMAFILE, reason="without llamafile the unfused attention reuses answers too")
async def test_without_flash_attention_on_the_default_build_exact_mode_reuses_whole_prefilled_blocks_only(
        http, tmp_path):
    """--flash-attn off with the default build forced (LLAMA_CPP_LIB_PATH; exact mode would load the batch-invariant
    one, exactness/build_choice.py): llamafile's GEMM makes prefill and one-row decode differ, the check says so,
    and exact mode falls back to its block rule: whole ALIGN blocks made by prefill, and the same text as `off`."""
    flags = ("--parallel", "2", "--ctx-size", "4096", "--flash-attn", "off")
    env = {LIB_PATH_ENV: str(default_dir())}
    exact = start_worker(tmp_path, *flags, env=env)
    off = start_worker(tmp_path, *flags, "--prefix-cache", "off", "--spec-type", "none", env=env)
    try:
        reused = [await converse(http, exact.url, q) for q in QUESTIONS[:2]]
        cold = [await converse(http, off.url, q) for q in QUESTIONS[:2]]
        async with http.get(exact.url + "/health") as response:
            exactness = (await response.json())["exactness"]
    finally:
        assert exact.stop() == 0 and off.stop() == 0
    assert exactness["decoded_cells_exact"] is False and exactness["answers_reused"] is False
    # and a verify call's rows, at some draft lengths, are not one-row decode's either: no drafts (None; load_check.py)
    assert exactness["library"] == "default" and exactness["drafts_keep_text"] is None
    assert [[t["answer"] for t in c] for c in reused] == [[t["answer"] for t in c] for c in cold]
    for conversation in reused:
        hits = cached(conversation)
        assert all(hit % ALIGN == 0 for hit in hits) and all(hit > 0 for hit in hits[1:]), hits
        assert all(t["usage"]["prompt_tokens"] - hit < ALIGN + 60 + 40 for t, hit in zip(conversation[1:], hits[1:]))


@dataclass(frozen=True)
class SideBySide:
    exact: WorkerProcess  # stopped; its log stays readable
    off: WorkerProcess | None  # stopped too, where this started it
    exactness: dict  # the exact worker's /health "exactness"


async def conversations_beside_off(http: aiohttp.ClientSession, tmp_path: Path, model: Path, *exact_flags: str,
                                   off: OffConversations | None = None) -> SideBySide:
    """Two conversations side by side on an exact worker serving `model` (with `exact_flags`), one after another
    on an `off` one (`off`, the turns of one already serving `model`, or one started here): the same answers, and
    each exact turn starts past the previous prompt (the previous answer's cells reused)."""
    flags = ("--model", str(model), "--parallel", "2", "--ctx-size", "4096")
    exact = start_worker(tmp_path, *flags, *exact_flags)
    # The reference decodes one token a step: `off` without drafts (--spec-type auto would draft there too).
    started = None
    if off is None:
        started = start_worker(tmp_path, *flags, "--prefix-cache", "off", "--spec-type", "none")
        off = OffConversations(started.url)
    try:
        reused = await asyncio.gather(*(converse(http, exact.url, q) for q in QUESTIONS[:2]))
        cold = [await off(http, q) for q in QUESTIONS[:2]]
        async with http.get(exact.url + "/health") as response:
            exactness = (await response.json())["exactness"]
    finally:
        assert exact.stop() == 0 and (started is None or started.stop() == 0)
    assert [[t["answer"] for t in c] for c in reused] == [[t["answer"] for t in c] for c in cold]
    for conversation in reused:
        hits = cached(conversation)
        assert all(hit > prev["usage"]["prompt_tokens"] for prev, hit in zip(conversation, hits[1:])), hits
    return SideBySide(exact, started, exactness)


async def test_a_q4_k_m_model_reuses_answers_side_by_side_and_equals_off(http, quantized, tmp_path):
    """K-quant weights: exact mode keeps ggml's tiled matmul under its batch-invariant switch and loads Q4_K
    unrepacked (exactness/ggml_switches.py), so the conversations, side by side, still equal `off` one by one, and
    each turn starts past the previous answer."""
    exactness = (await conversations_beside_off(http, tmp_path, quantized("q4_k_m"))).exactness
    assert exactness | {"tiled_mm": True, "repack": False, "answers_reused": True} == exactness, exactness


async def test_multi_turn_streamed_reports_cached_tokens(http, base_url):
    turns = await converse(http, base_url, QUESTIONS[0][:2], stream=True)
    assert cached(turns)[1] > 0


async def test_cached_tokens_zero_on_a_fresh_prefix(http, base_url):
    prompt = "Zebras and quokkas rarely meet, but if they did, they would talk about grass. " * 6
    first = await openai_once(http, base_url + "/v1/completions", {"prompt": prompt, **GREEDY})
    again = await openai_once(http, base_url + "/v1/completions", {"prompt": prompt, **GREEDY})
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    reused = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0 < reused < again["usage"]["prompt_tokens"]
    assert completion_text(first) == completion_text(again)
    async with http.get(base_url + "/metrics") as response:
        metrics = await response.text()
    counted = float(next(line.split()[-1] for line in metrics.splitlines()
                         if line.startswith("llm_worker_prompt_tokens_cached_total")))
    assert counted >= reused


async def test_a_prompt_one_token_past_a_chunk_boundary(http, base_url, worker_off):
    """129 tokens: the cache must not leave the last token to a one-row chunk, which a cold prefill never makes."""
    body = {"prompt": "Hello" + " hello" * 128, "temperature": 0, "max_tokens": 24}
    cold = await openai_once(http, worker_off.url + "/v1/completions", body)
    assert cold["usage"]["prompt_tokens"] % ALIGN == 1
    first = await openai_once(http, base_url + "/v1/completions", body)
    again = await openai_once(http, base_url + "/v1/completions", body)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert completion_text(cold) == completion_text(first) == completion_text(again)


async def test_execute_end_event_reports_cached_tokens(http, base_url):
    prompt = "A pool manager sends the same long instructions with every job it runs here. " * 8
    ends = []
    for job in ("cache-a", "cache-b"):
        events = await execute(http, base_url, {"job_id": job, "prompt": prompt, "max_tokens": 4, "temperature": 0})
        ends.append(next(e for e in events if isinstance(e, dict) and e.get("type") == "end"))
    assert ends[0]["prompt_tokens_cached"] == 0 and ends[1]["prompt_tokens_cached"] >= ALIGN


async def test_an_idle_engine_settles_the_answer_for_the_next_turn(http, base_url):
    """Cells of an answer are decode-made; while idle the engine prefills them again, so the next turn reuses them."""
    prompt = "Write about the old harbour, its boats and its storms, for a village newsletter. " * 4
    first = await openai_once(http, base_url + "/v1/completions", {"prompt": prompt, **GREEDY})
    await asyncio.sleep(2)  # the user reads the answer
    follow = prompt + completion_text(first) + "\nNow in one line:"
    again = await openai_once(http, base_url + "/v1/completions", {"prompt": follow, **GREEDY})
    prompt_only = first["usage"]["prompt_tokens"] // ALIGN * ALIGN
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > prompt_only + ALIGN


def long_prompts() -> list[str]:
    topics = ["lighthouses", "glaciers", "printing presses", "coral reefs"]
    return [(f"Notes on {t}: " + f"The story of {t} is long and full of small inventions. " * 60)[:3000]
            + f"\nIn one sentence, what matters most about {t}?" for t in topics]


async def test_long_prompts_concurrently_equal_alone(http, base_url, worker_off):
    """Four ~700-token prompts at once give the text each gives alone, on a cold and a warm cache."""
    prompts = long_prompts()
    body = lambda p: {"prompt": p, "temperature": 0, "max_tokens": 48}  # noqa: E731
    cold = [await openai_once(http, worker_off.url + "/v1/completions", body(p)) for p in prompts]
    alone = [completion_text(result) for result in cold]
    assert cold[0]["usage"]["prompt_tokens"] > 600
    for url in (worker_off.url, base_url, base_url):  # off, exact with a cold cache, exact with a warm one
        together = await asyncio.gather(*(openai_once(http, url + "/v1/completions", body(p)) for p in prompts))
        assert [completion_text(r) for r in together] == alone, url
    assert all(r["usage"]["prompt_tokens_details"]["cached_tokens"] > 512 for r in together)


async def test_eviction_with_more_conversations_than_slots(http, model_path, off_conversations, tmp_path):
    """Two slots, three conversations taking turns: slots are reused least recently used first."""
    small = start_worker(tmp_path, "--parallel", "2", "--ctx-size", "4096")
    try:
        interleaved = await asyncio.gather(*(converse(http, small.url, q) for q in QUESTIONS))
    finally:
        assert small.stop() == 0, small.log()[-3000:]
    off = [await off_conversations(http, q) for q in QUESTIONS]
    assert [[t["answer"] for t in c] for c in interleaved] == [[t["answer"] for t in c] for c in off]
    # The shared system prompt's chunks are found in whichever slot a conversation lands in.
    assert all(hit >= 64 for c in interleaved for hit in cached(c)[1:])  # the system prompt alone is ~90 tokens


async def test_conversations_outnumbering_slots_come_back_from_host_memory(http, off_conversations, tmp_path):
    """One slot, two conversations taking turns: each turn pushes the other's cells out of the slot into host
    memory (--cache-ram), and the other's next turn loads them back: it reuses its whole history, and every
    answer is what a cold worker gives."""
    one_slot = start_worker(tmp_path, "--parallel", "1", "--ctx-size", "2048")
    histories = [[{"role": "system", "content": SYSTEM}] for _ in range(2)]
    answers, usages = [[], []], [[], []]
    try:
        for turn in range(3):
            for c in range(2):
                histories[c].append({"role": "user", "content": QUESTIONS[c][turn]})
                result = await openai_once(http, one_slot.url + "/v1/chat/completions",
                                           {"messages": histories[c], **GREEDY})
                answers[c].append(completion_text(result))
                usages[c].append(result["usage"])
                histories[c].append({"role": "assistant", "content": answers[c][-1]})
        async with http.get(one_slot.url + "/metrics") as response:
            metrics = await response.text()
    finally:
        assert one_slot.stop() == 0, one_slot.log()[-3000:]
    # Its load-time check asked nothing of a second slot (llama.cpp logs an error for a slot it does not have).
    assert '"level": "error"' not in one_slot.log(), one_slot.log()[-3000:]
    held = next(line for line in metrics.splitlines() if line.startswith("llm_worker_cache_ram_bytes"))
    assert float(held.split()[-1]) > 0  # the conversation not in the slot is in host memory
    cold = [[t["answer"] for t in await off_conversations(http, QUESTIONS[c][:3])] for c in range(2)]
    assert answers == cold
    for usage in usages:  # the system prompt alone is ~90 tokens; each turn's prompt holds the one before
        assert all(later["prompt_tokens_details"]["cached_tokens"] >= earlier["prompt_tokens"]
                   for earlier, later in itertools.pairwise(usage)), usage


async def test_cancelled_request_leaves_nothing_wrongly_reused(http, base_url, worker_off):
    """A client that hangs up mid-answer: a later request over the same prompt answers as on a cold worker."""
    prompt = long_prompts()[1]
    async with http.post(base_url + "/v1/completions",
                         json={"prompt": prompt, "temperature": 0, "max_tokens": 400, "stream": True}) as response:
        assert response.status == 200
        async for line in response.content:
            if line.startswith(b"data: ") and json.loads(line[6:])["choices"][0]["text"]:
                break  # hang up after the first piece
    body = {"prompt": prompt + " Answer briefly.", "temperature": 0, "max_tokens": 48}
    warm = await openai_once(http, base_url + "/v1/completions", body)
    cold = await openai_once(http, worker_off.url + "/v1/completions", body)
    assert completion_text(warm) == completion_text(cold)
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


async def test_a_request_sharing_only_its_opening_leaves_the_other_cached(http, base_url, worker_off):
    """Two requests that share only their opening words, one after the other: the second takes another slot
    rather than drop the first's cells, so the first asked again reuses its whole prompt and answers as cold."""
    opening = "Field notes from the salt marsh survey, morning of the third day. "
    first = {"prompt": opening + "The herons waded along the channel at dawn. " * 24 + "Then", **GREEDY}
    second = {"prompt": opening + "The avocets swept the mud for worms at noon. " * 24 + "Then", **GREEDY}
    await openai_once(http, base_url + "/v1/completions", first)
    await openai_once(http, base_url + "/v1/completions", second)
    again = await openai_once(http, base_url + "/v1/completions", first)
    cold = await openai_once(http, worker_off.url + "/v1/completions", first)
    assert completion_text(again) == completion_text(cold)
    usage = again["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - 2 * ALIGN, usage


async def test_a_prefix_held_by_a_running_request_is_copied_from_its_slot(http, base_url, worker_off):
    """A prompt sharing a long prefix with a request still answering starts from a copy of that slot's cells,
    and answers as on a cold worker."""
    shared = "Ledger of the northern mill, kept by the miller's daughter through the long wet winter. " * 8
    running_body = {"prompt": shared + "Now copy the ledger out line by line:", "temperature": 0, "max_tokens": 300,
                    "stream": True, "logit_bias": {"0": -100, "2": -100}}  # SmolLM2's end tokens: keep it running
    body = {"prompt": shared + "Who kept the ledger?", "temperature": 0, "max_tokens": 32}
    async with http.post(base_url + "/v1/completions", json=running_body) as running:
        assert running.status == 200
        async for line in running.content:
            if line.startswith(b"data: ") and json.loads(line[6:])["choices"][0]["text"]:
                break  # decoding now: its slot holds the shared prefix, and no free slot does
        copied = await openai_once(http, base_url + "/v1/completions", body)
    cold = await openai_once(http, worker_off.url + "/v1/completions", body)
    assert completion_text(copied) == completion_text(cold)
    reused = copied["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert reused % ALIGN == 0 and reused >= copied["usage"]["prompt_tokens"] - 2 * ALIGN, copied["usage"]


async def test_a_burst_with_one_new_prefix_prefills_it_once(http, base_url, worker_off):
    """Requests sent together with the same new system prompt: one prefills it, the others wait for its cells
    and copy them, and every answer is what a cold worker gives."""
    # Longer than one step prefills (256 tokens), so the others arrive while it is still being prefilled.
    shared = "Harbour office rules for the night shift, posted by the quay master after the spring storms. " * 32
    bodies = [{"prompt": shared + question, "temperature": 0, "max_tokens": 24}
              for question in ("Who posted the rules?", "When were they posted?", "Which shift do they cover?")]
    together = await asyncio.gather(*(openai_once(http, base_url + "/v1/completions", body) for body in bodies))
    cold = [await openai_once(http, worker_off.url + "/v1/completions", body) for body in bodies]
    assert [completion_text(r) for r in together] == [completion_text(r) for r in cold]
    reused = sorted(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in together)
    prompt_tokens = together[0]["usage"]["prompt_tokens"]
    assert reused[0] == 0 and all(hit >= prompt_tokens - 3 * ALIGN for hit in reused[1:]), (reused, prompt_tokens)


async def test_fast_mode_reuses_generated_cells(http, model_path, tmp_path):
    fast = start_worker(tmp_path, "--parallel", "1", "--ctx-size", "2048", "--prefix-cache", "fast")
    try:
        turns = await converse(http, fast.url, QUESTIONS[0][:3])
    finally:
        assert fast.stop() == 0
    # fast reuses everything it holds: the whole previous prompt and answer, not whole chunks only.
    for previous, turn in itertools.pairwise(turns):
        assert turn["usage"]["prompt_tokens_details"]["cached_tokens"] >= previous["usage"]["prompt_tokens"]


def test_tiny_gemma3_q4_k_m_multi_turn_exact_equals_off(model_path, tmp_path):
    """Gemma 3's numerics (sliding-window layers, a q4_k_m quant): exact reuse still leaves greedy text as is."""
    folder = make_tiny("gemma3", tmp_path / "tiny-gemma3", oracle(model_path).f32)
    env = {"LLM_WORKER_CACHE": str(tmp_path / "cache")}
    texts = {}
    for mode in ("exact", "off"):
        worker = start_worker(tmp_path, "--model", str(folder), "--quantize", "q4_k_m", "--parallel", "1",
                              "--ctx-size", "1024", "--prefix-cache", mode,
                              *(("--spec-type", "none") if mode == "off" else ()), env=env)
        try:
            texts[mode] = _grow_prompt(worker)
        finally:
            assert worker.stop() == 0, worker.log()[-3000:]
    assert texts["exact"][0] == texts["off"][0]
    assert texts["exact"][1][-1] > 0 and texts["off"][1] == [0] * len(texts["off"][1])


def _grow_prompt(worker: WorkerProcess) -> tuple[list[str], list[int]]:
    """Four turns of a completion prompt that grows by its own answer plus a new line."""
    import urllib.request

    prompt, answers, hits = "The quick brown fox jumps over the lazy dog. " * 12, [], []
    for turn in range(4):
        body = json.dumps({"prompt": prompt, "temperature": 0, "max_tokens": 24}).encode()
        request = urllib.request.Request(worker.url + "/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            result = json.load(response)
        answers.append(completion_text(result))
        hits.append(result["usage"]["prompt_tokens_details"]["cached_tokens"])
        prompt += answers[-1] + f"\nLine {turn}: the fox rests. "
    return answers, hits
