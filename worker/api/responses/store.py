"""Stored responses (`store: true`), kept in this process's memory for previous_response_id, GET and DELETE: each the
conversation up to its answer, so a continuation renders the same prompt prefix and lands on the slot holding its cells.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

# At most this many stored responses, the least recently stored or used dropped first; all are lost on restart
# (docs/agents-and-evals.md says so). Each is bounded by one request's context (a few hundred KiB of text at most).
MAX_STORED = 1024

Message = dict[str, Any]


@dataclass(frozen=True)
class Stored:
    response: dict[str, Any]  # the response object, as GET returns it
    conversation: list[Message]  # the input (without instructions) and the answer, as a continuation's history


class ResponseStore:
    def __init__(self, capacity: int = MAX_STORED) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, Stored] = OrderedDict()

    def put(self, stored: Stored) -> None:
        key = stored.response["id"]
        self._entries[key] = stored
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def get(self, response_id: str) -> Stored | None:
        stored = self._entries.get(response_id)
        if stored is not None:
            self._entries.move_to_end(response_id)  # a conversation still going on stays
        return stored

    def delete(self, response_id: str) -> bool:
        return self._entries.pop(response_id, None) is not None
