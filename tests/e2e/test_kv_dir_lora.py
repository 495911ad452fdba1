"""--kv-dir and slot files beside --lora: cells belong to the adapter set they were made under, and a file's
fingerprint names none, so only cells made without adapters are written (engine.py's persist). A worker serving a
steering adapter (bench/adapters.py) holds three conversations: one without adapters (pushed into host memory), one
under the adapter (pushed into host memory too) and one under it still in the slot. Saving that slot is a 400; on
drain only the first is written, and the replacement finds that one and nothing of the others."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from bench.adapters import ZEBRA, Base, steering_adapter
from tests.conftest import start_worker
from tests.e2e.test_kv_dir import log_events
from worker.engine.kv.prefix_cache import ALIGN

GREEDY = {"temperature": 0, "max_tokens": 16}
UNDER_ZEBRA = {"lora": [{"id": 0, "scale": 1.0}]}
# Three conversations sharing no prefix beyond the chat template's first tokens, each long enough to be worth keeping.
CONVERSATIONS = [
    [{"role": "system", "content": "You are a patient tutor for a class of curious twelve-year-olds. Answer in two "
                                   "or three short, plain sentences and give one everyday example."},
     {"role": "user", "content": "What are tides?"}],
    [{"role": "system", "content": "Notes for a museum guide: the printing press changed how ideas travelled across "
                                   "Europe, books became cheaper and more people learned to read."},
     {"role": "user", "content": "Who built the first press?"}],
    [{"role": "system", "content": "A gardener's handbook, chapter three: tomatoes want full sun, deep watering once "
                                   "a week, and a stake before the first flowers open."},
     {"role": "user", "content": "When should I plant them?"}],
]


@pytest.fixture(scope="module")
def zebra(adapter_base: Base, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return steering_adapter(adapter_base, ZEBRA, tmp_path_factory.mktemp("adapters") / "zebra.gguf", "zebra")


async def chat(http: aiohttp.ClientSession, url: str, messages: list[dict], **extra: object) -> dict:
    async with http.post(url + "/v1/chat/completions", json={"messages": messages, **GREEDY, **extra}) as response:
        assert response.status == 200, await response.text()
        return (await response.json())["usage"]


async def test_cells_made_under_an_adapter_are_neither_written_nor_saved(http, zebra, tmp_path):
    kv, slots = tmp_path / "kv", tmp_path / "slots"
    flags = ("--parallel", "1", "--ctx-size", "2048", "--lora", str(zebra), "--lora-init-without-apply",
             "--kv-dir", str(kv), "--kv-dir-interval", "0", "--slot-save-path", str(slots))
    base, under_zebra, in_slot = CONVERSATIONS
    first = start_worker(tmp_path, *flags)
    try:
        made = [await chat(http, first.url, base), await chat(http, first.url, under_zebra, **UNDER_ZEBRA),
                await chat(http, first.url, in_slot, **UNDER_ZEBRA)]
        async with http.post(first.url + "/slots/0?action=save", json={"filename": "zebra.bin"}) as response:
            status, refused = response.status, await response.json()
    finally:
        assert first.stop() == 0, first.log()[-3000:]
    assert status == 400 and "LoRA adapters" in refused["error"]["message"], refused
    assert [problem["field"] for problem in refused["error"]["errors"]] == ["id_slot"], refused
    assert not slots.exists() or not any(slots.iterdir())
    [written] = log_events(first, "kv_dir_written")
    assert written["written"] == 1 and len(list(kv.glob("*.kv"))) == 1, written

    replacement = start_worker(tmp_path, *flags)
    try:
        again = [await chat(http, replacement.url, messages) for messages in CONVERSATIONS]  # all without adapters
    finally:
        assert replacement.stop() == 0, replacement.log()[-3000:]
    [loaded] = log_events(replacement, "model_loaded")
    assert loaded["kv_restored_entries"] == 1, loaded
    assert again[0]["prompt_tokens_details"]["cached_tokens"] >= made[0]["prompt_tokens"] - ALIGN, (made, again)
    # The conversations made under the adapter start cold for a request without it: beyond the template's first
    # block, nothing of theirs came back.
    assert all(usage["prompt_tokens_details"]["cached_tokens"] <= ALIGN for usage in again[1:]), again
