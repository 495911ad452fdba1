"""Hot prefixes that outlive a slot and the process, on real workers: llama-server's slot save/erase/restore under
--slot-save-path, and a replacement worker started on the same --kv-dir, which starts warm, skips every file it
must not load, and answers as a worker with --prefix-cache off does.

Every worker here has 2,048 cells a slot, as the reference worker does: texts are compared between workers whose
slots are alike.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.conftest import WorkerProcess, start_worker
from tests.helpers import execute
from worker.engine.exactness.build_choice import LIB_PATH_ENV, default_dir
from worker.engine.kv import cell_file
from worker.engine.kv.prefix_cache import ALIGN

SYSTEM = ("You are a patient tutor for a class of curious twelve-year-olds. Answer in two or three short, plain "
          "sentences and give one everyday example.")
QUESTIONS = [("What are tides?", "Why are there two a day?"), ("How do bees make honey?", "Why do they dance?"),
             ("What is a volcano?", "Why do some explode?")]
# The fourth conversation, through /execute: long enough to be worth keeping (32 cells or more).
RAW_PROMPT = ("Notes for a museum guide. The printing press changed how ideas travelled across Europe: books became "
              "cheaper, more people learned to read, and scientists could share exact copies of their tables and "
              "drawings. Visitors often ask who built the first press, what it printed first, and why it mattered "
              "so much. The short answer for a visitor is that")
GREEDY = {"temperature": 0, "max_tokens": 24}
SLOT = ("--parallel", "1", "--ctx-size", "2048")
TWO_SLOTS = ("--parallel", "2", "--ctx-size", "4096")


async def chat(http: aiohttp.ClientSession, url: str, messages: list[dict]) -> tuple[str, dict]:
    async with http.post(url + "/v1/chat/completions", json={"messages": messages, **GREEDY}) as response:
        assert response.status == 200, await response.text()
        body = await response.json()
    return body["choices"][0]["message"]["content"], body["usage"]


async def job(http: aiohttp.ClientSession, url: str, prompt: str) -> tuple[str, dict]:
    events = await execute(http, url, {"job_id": hashlib.sha256(prompt.encode()).hexdigest()[:12], "prompt": prompt,
                                       "max_tokens": GREEDY["max_tokens"], "temperature": 0})
    return "".join(e["t"] for e in events if isinstance(e, dict) and e["type"] == "token"), events[-2]


async def slot_action(http: aiohttp.ClientSession, url: str, action: str, slot: int = 0,
                      filename: str | None = None) -> tuple[int, dict]:
    body = {} if filename is None else {"filename": filename}
    async with http.post(f"{url}/slots/{slot}?action={action}", json=body) as response:
        return response.status, await response.json()


def log_events(worker: WorkerProcess, event: str) -> list[dict]:
    lines = (json.loads(line) for line in worker.log().splitlines() if line.startswith("{"))
    return [line for line in lines if line["event"] == event]


@dataclass
class SlotRound:
    """A conversation's first turn, its slot saved and erased, the next turn cold, the file restored, the next turn
    again."""

    messages: list[dict]
    first: dict  # the first turn's usage
    saved: dict
    erased: dict
    cold: tuple[str, dict]  # the next turn's text and usage, the slot erased
    restored: dict
    warm: tuple[str, dict]  # the same turn once the file is restored


async def save_erase_restore(http: aiohttp.ClientSession, url: str, folder: Path) -> SlotRound:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[0][0]}]
    answer, first = await chat(http, url, messages)
    status, saved = await slot_action(http, url, "save", filename="tides.bin")
    assert status == 200 and saved["id_slot"] == 0 and saved["filename"] == "tides.bin", saved
    assert saved["n_written"] == (folder / "tides.bin").stat().st_size and saved["timings"]["save_ms"] > 0
    status, erased = await slot_action(http, url, "erase")
    assert status == 200, erased
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": QUESTIONS[0][1]}]
    cold = await chat(http, url, messages)
    assert cold[1]["prompt_tokens_details"]["cached_tokens"] == 0  # nothing left to reuse (no host memory)
    status, restored = await slot_action(http, url, "restore", filename="tides.bin")
    assert status == 200, restored
    assert (restored["n_restored"], restored["n_read"]) == (saved["n_saved"], saved["n_written"])
    warm = await chat(http, url, messages)
    # The whole first turn but at most its last partial block.
    assert warm[1]["prompt_tokens_details"]["cached_tokens"] >= first["prompt_tokens"] - ALIGN, warm
    return SlotRound(messages, first, saved, erased, cold, restored, warm)


async def test_a_saved_slot_erased_and_restored_is_reused_and_answers_as_a_cold_worker(worker_off, tmp_path):
    folder = tmp_path / "slots"
    worker = start_worker(tmp_path, *SLOT, "--cache-ram", "0", "--slot-save-path", str(folder), "--api-key", "k")
    try:
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer k"}) as http:
            done = await save_erase_restore(http, worker.url, folder)
            async with http.get(worker.url + "/slots") as response:
                # speculative: --spec-type auto drafts by prompt lookup in exact mode on the cpu backend
                assert await response.json() == [{"id": 0, "n_ctx": 2048, "speculative": True,
                                                   "is_processing": False}]
            outside = ["../escape.bin", str(tmp_path / "absolute.bin"), "sub/dir.bin", "..", ".hidden", ""]
            for name in outside:
                status, refused = await slot_action(http, worker.url, "save", filename=name)
                assert status == 400 and refused["error"]["param"] == "filename", (name, refused)
            for action, slot, name in (("restore", 0, "missing.bin"), ("save", 1, "x.bin"), ("bogus", 0, "x.bin")):
                status, refused = await slot_action(http, worker.url, action, slot, name)
                assert status == 400, refused
        async with aiohttp.ClientSession() as anonymous, anonymous.post(worker.url + "/slots/0?action=erase") as r:
            assert r.status == 401
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    # Answers reused (the load-time check trusts them here): the file holds the whole first turn.
    assert done.saved["n_saved"] >= done.first["prompt_tokens"] and done.erased["n_erased"] == done.saved["n_saved"]
    assert [path.name for path in folder.iterdir()] == ["tides.bin"]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["slots", worker.log_path.name])
    async with aiohttp.ClientSession() as http:
        reference, _ = await chat(http, worker_off.url, done.messages)
    assert done.warm[0] == done.cold[0] == reference


async def test_under_the_block_rule_a_slot_file_holds_the_prefilled_blocks_and_restores_them_exactly(tmp_path):
    """Where answers' cells are not trusted (--flash-attn off on llama-cpp-python's own build), a slot's file holds
    its prefill-made 16-position blocks with the rest of the stream riding along, dropped when restored: the next
    turn reuses those blocks and answers as it did cold on the same worker."""
    folder = tmp_path / "slots"
    worker = start_worker(tmp_path, *SLOT, "--cache-ram", "0", "--flash-attn", "off", "--slot-save-path",
                          str(folder), env={LIB_PATH_ENV: str(default_dir())})
    try:
        async with aiohttp.ClientSession() as http:
            done = await save_erase_restore(http, worker.url, folder)
            async with http.get(worker.url + "/health") as response:
                assert (await response.json())["exactness"]["answers_reused"] is False
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    n_saved = done.saved["n_saved"]
    assert n_saved % ALIGN == 0 and done.first["prompt_tokens"] - ALIGN < n_saved <= done.erased["n_erased"]
    assert done.warm[0] == done.cold[0]


def header_of(raw: bytes) -> tuple[int, int, dict]:
    """A cell file's header: where it starts, its length, and what it says."""
    start = len(cell_file.MAGIC) + cell_file.LENGTH.size
    (length,) = cell_file.LENGTH.unpack_from(raw, len(cell_file.MAGIC))
    return start, length, json.loads(raw[start:start + length])


def rewritten(raw: bytes, **fingerprint: str) -> bytes:
    """A whole cell file whose fingerprint says otherwise: what another model, build or cell type writes, with its
    checksum made again (only the fingerprint may then refuse it)."""
    start, length, header = header_of(raw)
    header["fingerprint"].update(fingerprint)
    new = json.dumps(header).encode()
    body = cell_file.MAGIC + cell_file.LENGTH.pack(len(new)) + new + raw[start + length:-cell_file.DIGEST_BYTES]
    return body + hashlib.sha256(body).digest()


def plant_unusable_files(folder: Path) -> dict[str, str]:
    """Files the replacement must skip, beside what the first worker wrote: file name -> start of its warning."""
    raw = max(folder.glob("*.kv"), key=lambda path: path.stat().st_size).read_bytes()
    mine = header_of(raw)[2]["fingerprint"]
    other_type = "q8_0" if mine["cache_type_k"] == "f16" else "f16"
    draw = random.Random(38)
    planted = {f"{draw.getrandbits(128):032x}.kv": (content, why) for content, why in [
        *((raw[:draw.randrange(len(raw))], "truncated") for _ in range(3)),
        (rewritten(raw, model_sha256="0" * 64), "fingerprint differs: model_sha256 0000"),  # another model
        (rewritten(raw, libraries_sha256="1" * 64), "fingerprint differs: libraries_sha256 1111"),  # another build
        # another ggml switch (a warning shows a value's first 16 characters)
        (rewritten(raw, ggml_env="GGML_CPU_TILED_MM=0"), "fingerprint differs: ggml_env GGML_CPU_TILED_M"),
        (rewritten(raw, cache_type_k=other_type),
         f"fingerprint differs: cache_type_k {other_type} here {mine['cache_type_k']}")]}
    for name, (content, _) in planted.items():
        (folder / name).write_bytes(content)
    return {name: why for name, (_, why) in planted.items()}


async def test_a_replacement_on_the_same_kv_dir_reuses_each_history_and_equals_off(http, worker_off, tmp_path):
    """Four conversations on two slots (two pushed into host memory), SIGTERM: all four are written on drain. A
    replacement on the same folder, beside seven files it must not load, loads them before it reports ready, and
    each conversation's next turn reuses its history and answers as a cold worker does."""
    kv = tmp_path / "kv"
    flags = (*TWO_SLOTS, "--kv-dir", str(kv), "--kv-dir-interval", "0")
    histories = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": first}]
                 for first, _ in QUESTIONS]
    first_worker = start_worker(tmp_path, *flags)
    try:
        firsts = [await chat(http, first_worker.url, messages) for messages in histories]
        raw_answer, raw_end = await job(http, first_worker.url, RAW_PROMPT)
    finally:
        assert first_worker.stop() == 0, first_worker.log()[-3000:]
    [written] = log_events(first_worker, "kv_dir_written")
    assert written["written"] == 4 and len(list(kv.glob("*.kv"))) == 4, written
    # Made under the build exact mode loads, its switch on (tests/e2e/test_batch_invariant_serve.py): so said.
    made = header_of(next(kv.glob("*.kv")).read_bytes())[2]["fingerprint"]
    assert made["build"] == "batch-invariant" and "batch_invariant=True" in made["kernels"], made
    assert "GGML_CPU_BATCH_INVARIANT=1" in made["ggml_env"].split(";"), made
    planted = plant_unusable_files(kv)
    for messages, (answer, _), (_, second) in zip(histories, firsts, QUESTIONS):
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": second}]
    raw_next = RAW_PROMPT + raw_answer + " Later,"

    replacement = start_worker(tmp_path, *flags)
    try:
        nexts = [await chat(http, replacement.url, messages) for messages in histories]
        raw_text, raw_next_end = await job(http, replacement.url, raw_next)
        async with http.post(replacement.url + "/tokenize", json={"content": RAW_PROMPT, "add_special": True}) as r:
            raw_tokens = len((await r.json())["tokens"])
        async with http.get(replacement.url + "/health") as response:
            health = await response.json()
        async with http.get(replacement.url + "/metrics") as response:
            metrics = {line.split()[0]: float(line.split()[1]) for line in (await response.text()).splitlines()
                       if line.startswith("llm_worker_kv_dir") or line.startswith("llm_worker_cache_ram")}
    finally:
        assert replacement.stop() == 0, replacement.log()[-3000:]

    [loaded] = log_events(replacement, "model_loaded")
    assert loaded["kv_restored_entries"] == 4 and loaded["cache_ram_limit_bytes"] == 8192 << 20
    assert metrics["llm_worker_kv_dir_restored_entries"] == 4
    assert metrics["llm_worker_kv_dir_restored_tokens"] == loaded["kv_restored_tokens"]
    assert metrics["llm_worker_kv_dir_skipped_entries"] == len(planted)
    assert health["cache_ram_limit_bytes"] == 8192 << 20 and 0 <= health["cache_ram_bytes"] <= 8192 << 20
    skipped = {Path(line["file"]).name: line["reason"] for line in log_events(replacement, "kv_entry_skipped")}
    assert skipped.keys() == planted.keys()
    assert all(skipped[name].startswith(why) for name, why in planted.items()), skipped
    for (_, before), (_, after) in zip(firsts, nexts):  # the history but at most its last partial block
        assert after["prompt_tokens_details"]["cached_tokens"] >= before["prompt_tokens"] - ALIGN, (before, after)
    assert raw_end["type"] == raw_next_end["type"] == "end"
    assert raw_next_end["prompt_tokens_cached"] >= raw_tokens - ALIGN > raw_end["prompt_tokens_cached"]
    cold = [await chat(http, worker_off.url, messages) for messages in histories]
    assert [text for text, _ in nexts] == [text for text, _ in cold]
    assert raw_text == (await job(http, worker_off.url, raw_next))[0]
