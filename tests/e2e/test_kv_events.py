"""--kv-events on a real worker, read by a ZMQ subscriber that decodes the frames as llm-d's vLLM adapter does
(three frames; the batch and its events array-encoded msgpack, padded to their fields): a conversation's earlier turn
is announced before its next turn arrives, and the next turn reuses every announced cell; cells pushed out of the
slot move to host memory's medium; a drained worker clears its blocks; a taken endpoint fails the start."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgpack
import pytest
import zmq

from tests.conftest import WorkerProcess, free_port, start_worker
from worker.engine.kv.blocks import BLOCK_TOKENS

POD = "pod-a"
FIRST = ("Notes for a museum guide. The printing press changed how ideas travelled across Europe: books became "
         "cheaper, more people learned to read, and scientists could share exact copies of their tables and "
         "drawings. The short answer for a visitor is that")
OTHER = ("A recipe card for a school kitchen. Bread needs flour, water, salt and yeast; the dough rests until it "
         "doubles, is shaped, rests again and bakes in a hot oven until it sounds hollow. The first step is to")
STORED_FIELDS = 9  # llm-d's BlockStored: tag, hashes, parent, token ids, block size, lora id, medium, lora name, keys


@dataclass
class Subscriber:
    """What a router's indexer keeps: each medium's blocks, by hash."""

    endpoint: str
    messages: list[tuple[bytes, int, list]] = field(default_factory=list)
    blocks: dict[str, dict[int, tuple[int | None, list[int]]]] = field(default_factory=dict)
    cleared: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.SUB)
        self._socket.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self._socket.connect(self.endpoint)
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            if not self._socket.poll(100):
                continue
            topic, seq, payload = self._socket.recv_multipart()
            assert len(seq) == 8
            batch = msgpack.unpackb(payload)
            assert isinstance(batch[0], float) and len(batch) >= 2
            with self._lock:
                self.messages.append((topic, int.from_bytes(seq, "big"), batch[1]))
                for event in batch[1]:
                    self._apply(event)

    def _apply(self, event: list) -> None:
        tag = event[0]
        if tag == "BlockStored":
            _, hashes, parent, tokens, size, _lora_id, medium, _lora_name, _keys = (
                event + [None] * (STORED_FIELDS - len(event)))
            assert size == BLOCK_TOKENS and len(tokens) == size * len(hashes)
            assert all(0 <= token < 2 ** 32 for token in tokens) and all(0 <= h < 2 ** 64 for h in hashes)
            held = self.blocks.setdefault(medium or "GPU", {})
            assert parent is None or parent in held, "a block's parent is announced before it"
            for at, block_hash in enumerate(hashes):
                held[block_hash] = (parent, tokens[at * size:(at + 1) * size])
                parent = block_hash
        elif tag == "BlockRemoved":
            held = self.blocks.get(event[2] if len(event) > 2 and event[2] else "GPU", {})
            for block_hash in event[1]:
                assert held.pop(block_hash, None) is not None, "only a stored block is removed"
        else:
            assert event == ["AllBlocksCleared"]
            self.cleared += 1
            self.blocks.clear()

    def chains(self, medium: str) -> list[list[int]]:
        """Every chain of `medium`'s blocks from its first block, as tokens."""
        with self._lock:
            held = dict(self.blocks.get(medium, {}))
        chains = []
        for block_hash in held:
            chain: list[int] = []
            at: int | None = block_hash
            while at is not None:
                at, block = held[at]
                chain[:0] = block
            chains.append(chain)
        return chains

    def longest(self, medium: str, tokens: list[int]) -> list[int]:
        """The longest chain of `medium`'s blocks that `tokens` begin with."""
        return max((chain for chain in self.chains(medium) if tokens[:len(chain)] == chain), key=len, default=[])

    def conversation(self, prompt: list[int]) -> list[int]:
        """The longest chain in the slots' medium that begins with the prompt's first block: its turns so far."""
        return max((chain for chain in self.chains("GPU") if chain[:BLOCK_TOKENS] == prompt[:BLOCK_TOKENS]),
                   key=len, default=[])

    def wait_for(self, what: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline, f"not seen in {timeout} s: {self.messages[-5:]}"
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()
        self._context.term()


@pytest.fixture(scope="module")
def endpoint() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def published(model_path: Path, tmp_path_factory: pytest.TempPathFactory, endpoint: str):
    worker = start_worker(tmp_path_factory.mktemp("kv_events"), "--parallel", "1", "--ctx-size", "2048",
                          "--spec-type", "none", "--kv-events", endpoint, "--kv-events-pod", POD)
    subscriber = Subscriber(endpoint)
    yield worker, subscriber
    worker.stop()
    subscriber.close()


async def tokens_of(http: aiohttp.ClientSession, url: str, text: str) -> list[int]:
    async with http.post(url + "/tokenize", json={"content": text}) as response:
        return (await response.json())["tokens"]


async def complete(http: aiohttp.ClientSession, url: str, prompt: list[int]) -> dict:
    # SmolLM2's three special tokens banned: the answer runs its 40 tokens, so its cells fill whole blocks.
    body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "logit_bias": {"0": -100, "1": -100, "2": -100}}
    async with http.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_a_turn_is_announced_before_the_next_arrives_and_the_next_reuses_every_announced_cell(
        http: aiohttp.ClientSession, published: tuple[WorkerProcess, Subscriber]):
    worker, subscriber = published
    time.sleep(0.5)  # a SUB socket hears nothing sent before its subscription reached the publisher
    prompt = await tokens_of(http, worker.url, FIRST)
    first = await complete(http, worker.url, prompt)
    assert first["usage"]["completion_tokens"] == 40
    whole_prompt = len(prompt) - len(prompt) % BLOCK_TOKENS
    assert whole_prompt >= 2 * BLOCK_TOKENS
    # Its answer's cells too (all but its last token, never decoded), once exact mode has made them what a prefill
    # makes (settled, a moment after the turn).
    cells = len(prompt) + 40 - 1
    subscriber.wait_for(lambda: len(subscriber.conversation(prompt)) == cells - cells % BLOCK_TOKENS)
    announced = subscriber.conversation(prompt)
    assert announced[:whole_prompt] == prompt[:whole_prompt]
    topics = {topic for topic, _, _ in subscriber.messages}
    async with http.get(worker.url + "/v1/models") as response:
        model = (await response.json())["data"][0]["id"]
    assert topics == {f"kv@{POD}@{model}".encode()}
    numbers = [seq for _, seq, _ in subscriber.messages]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    # The router sends the next turn here: it begins with what was announced, and every announced cell is reused.
    question = await tokens_of(http, worker.url, " Who built the first one?")
    second = await complete(http, worker.url, announced + question)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= len(announced)


async def test_cells_pushed_out_of_the_slot_move_to_host_memory_and_a_drained_worker_clears_them(
        http: aiohttp.ClientSession, published: tuple[WorkerProcess, Subscriber]):
    worker, subscriber = published
    time.sleep(0.5)
    prompt = await tokens_of(http, worker.url, FIRST)
    subscriber.wait_for(lambda: len(subscriber.conversation(prompt)) >= len(prompt) - len(prompt) % BLOCK_TOKENS)
    held = subscriber.conversation(prompt)
    other = await tokens_of(http, worker.url, OTHER)
    await complete(http, worker.url, other)  # the one slot goes to another conversation
    subscriber.wait_for(lambda: len(subscriber.longest("CPU", held)) == len(held))
    subscriber.wait_for(lambda: len(subscriber.longest("GPU", other)) >= len(other) - len(other) % BLOCK_TOKENS)
    assert subscriber.longest("GPU", held) == []  # gone from the slot's medium
    cleared = subscriber.cleared
    assert worker.stop() == 0
    subscriber.wait_for(lambda: subscriber.cleared == cleared + 1, timeout=10)
    assert subscriber.blocks == {}


def test_a_taken_endpoint_fails_the_start_in_one_line(tmp_path: Path):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with zmq.Context() as context, context.socket(zmq.PUB) as holder:
        holder.bind(endpoint)
        taken = start_worker(tmp_path, "--kv-events", endpoint, wait=False)
        assert taken.process.wait(60) != 0
    assert f"--kv-events {endpoint}: Address already in use" in taken.log()
