"""--kv-events: the reusable cells published over ZMQ as vLLM's KV events, which llm-d's precise prefix-cache routing
reads to send a prompt to the worker that holds most of it (docs/operations.md, "KV events").

Each message is three frames, as vLLM's ZmqEventPublisher sends them: the topic `kv@<pod>@<model>`, an 8-byte
big-endian sequence number, and a msgpack batch `[ts, [event, ...]]` of array-encoded events, the first element of
each its name. A thread of its own hashes and sends: the engine thread only hands it the cells it holds
(kv/held_cells.py), and only when they changed."""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from worker.engine import AdapterSet
from worker.engine.host import BLOCK_TOKENS, BlockIndex, HeldCells, Removed, Stored
from worker.worker_error import WorkerError

if TYPE_CHECKING:
    from worker.engine import ServedModel

log = structlog.get_logger(__name__)

# How often --kv-dir's files are looked at when the engine is quiet (they change every --kv-dir-interval seconds).
DISK_POLL_S = 1.0
# What close() waits for the last messages (AllBlocksCleared) to leave.
LINGER_MS = 1000
_STOP = None  # on the queue: the thread sends what it has and ends
CLEARED = ["AllBlocksCleared"]


class KvEvents:
    def __init__(self, endpoint: str, pod: str | None = None) -> None:
        """Bind the PUB socket now, before the model loads, so that a taken port fails the start at once."""
        try:
            import msgpack
            import zmq
        except ImportError as exc:
            raise WorkerError(f"--kv-events needs pyzmq and msgpack ({exc}): pip install 'llm-worker[kv-events]'") \
                from exc
        self._pack: Callable[[Any], bytes] = msgpack.packb
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUB)
        self._socket.setsockopt(zmq.LINGER, LINGER_MS)
        try:
            self._socket.bind(endpoint)
        except zmq.ZMQError as exc:
            self._socket.close()
            self._context.term()
            raise WorkerError(f"--kv-events {endpoint}: {exc}; give a free address, such as tcp://*:5557") from exc
        self.endpoint = endpoint
        self.pod = pod or socket.gethostname()
        self._topic = b""
        self._seq = 0
        self._index = BlockIndex()
        self._held: queue.SimpleQueue[list[HeldCells] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._on_disk: Callable[[], list[HeldCells]] = list
        self._poll_s: float | None = None
        self._lora_names: tuple[str, ...] = ()

    def start(self, served: ServedModel, model: str) -> None:
        """Publish `served`'s cells as model `model`'s, from now until close(): first AllBlocksCleared (a subscriber
        forgets what an earlier worker of this name held), then what it holds and each change."""
        self._topic = f"kv@{self.pod}@{model}".encode()
        self._on_disk = served.cells.on_disk
        self._poll_s = DISK_POLL_S if served.cells.disk is not None else None  # no --kv-dir: woken by changes only
        self._lora_names = tuple(lora.name for lora in served.facts.loras)
        self._send([CLEARED])
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()
        served.engine.watch_cells(self._held.put)
        log.info("kv_events_publishing", endpoint=self.endpoint, topic=self._topic.decode())

    def close(self) -> None:
        """After the engine stopped: AllBlocksCleared (the cells went with it), then the socket closes."""
        if self._thread is not None:
            self._held.put(_STOP)
            self._thread.join()
            self._send([CLEARED])
        self._socket.close()
        self._context.term()

    def _run(self) -> None:
        engine_cells: list[HeldCells] = []
        stopping = False
        while not stopping:
            try:
                looks = [self._held.get(timeout=self._poll_s)]
            except queue.Empty:
                looks = []
            while not self._held.empty():  # only the newest look matters
                looks.append(self._held.get_nowait())
            stopping = _STOP in looks
            newest = [look for look in looks if look is not _STOP]
            if newest:
                engine_cells = newest[-1] or []
            events = self._index.update([*engine_cells, *self._on_disk()])
            if events:
                self._send([self._encoded(event) for event in events])

    def _encoded(self, event: Stored | Removed) -> list:
        """vLLM's array form of the event (msgspec, array_like and tag): its name, then its fields in order, the
        trailing defaults (extra_keys, group_idx) left out as msgspec's omit_defaults does."""
        if isinstance(event, Removed):
            return ["BlockRemoved", event.hashes, event.medium]
        blocks = event.blocks
        lora_id, lora_name = self._lora(event.adapters)
        return ["BlockStored", [block.hash for block in blocks], blocks[0].parent,
                [token for block in blocks for token in block.tokens], BLOCK_TOKENS, lora_id, event.medium, lora_name]

    def _lora(self, adapters: AdapterSet) -> tuple[int | None, str | None]:
        """vLLM's lora_id (from 1) and lora_name (what a request's `model` names) of the cells' first adapter, and
        the others' names after it; None, None for the base model's cells."""
        ids = [adapter for adapter, _ in adapters.scales]
        if not ids:
            return None, None
        return ids[0] + 1, ",".join(self._lora_names[adapter] for adapter in ids)

    def _send(self, events: list) -> None:
        payload = self._pack([time.time(), events])
        self._socket.send_multipart([self._topic, self._seq.to_bytes(8, "big"), payload])
        self._seq += 1
