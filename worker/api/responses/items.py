"""The answer as Responses output items (reasoning, message, function_call), and the stream events that send them,
built from the same pieces in the same order, so a stream adds up to the whole response (as anthropic/blocks.py).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from worker.engine import Finished, FinishReason
from worker.engine import ToolCall as Call

Item = dict[str, Any]
Event = dict[str, Any]  # without its sequence_number, which the sender numbers

# A kind of streamed text: its item's id prefix, its empty item and content part, and its events' name.
_KINDS: dict[str, tuple[str, Item, dict[str, Any], str]] = {
    "reasoning": ("rs_", {"type": "reasoning", "summary": [], "content": []},
                  {"type": "reasoning_text", "text": ""}, "response.reasoning_text"),
    "text": ("msg_", {"type": "message", "role": "assistant", "content": []},
             {"type": "output_text", "text": "", "annotations": [], "logprobs": []}, "response.output_text"),
}


def function_call(call: Call, status: str = "completed") -> Item:
    """A call as an output item; its call_id is what the function_call_output that answers it names."""
    return {"type": "function_call", "id": "fc_" + call.id.removeprefix("call_"), "call_id": call.id,
            "name": call.name, "arguments": call.arguments, "status": status}


class OutputItems:
    """The response's output so far; each addition returns the events that stream it.

    A reasoning or message item opens when its kind of text first comes (output_item.added, then its one content
    part) and closes when another kind starts or the answer ends (the part's and the item's .done events)."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self._open: str | None = None  # the kind of the last item while it still takes text

    def add(self, kind: str, text: str) -> list[Event]:
        """Text of a kind (reasoning or text): into the open item of that kind, or a new one."""
        if not text:
            return []
        events = []
        prefix, empty, part, name = _KINDS[kind]
        if self._open != kind:
            events = self.close()
            item = {"id": prefix + uuid.uuid4().hex, **copy.deepcopy(empty), "status": "in_progress"}
            self.items.append(item)
            self._open = kind
            events += [self._about("response.output_item.added", item=copy.deepcopy(item)),
                       self._about("response.content_part.added", item_id=item["id"], content_index=0,
                                   part=dict(part))]
            item["content"].append(copy.deepcopy(part))
        self.items[-1]["content"][0]["text"] += text
        delta: dict[str, Any] = {"logprobs": []} if kind == "text" else {}
        return [*events, self._about(f"{name}.delta", item_id=self.items[-1]["id"], content_index=0, delta=text,
                                     **delta)]

    # A function_call item comes whole, as calls are released once written whole: its arguments as one delta.
    def call(self, call: Call) -> list[Event]:
        events = self.close()
        item = function_call(call)
        self.items.append(item)
        return [*events,
                self._about("response.output_item.added", item={**function_call(call, "in_progress"), "arguments": ""}),
                self._about("response.function_call_arguments.delta", item_id=item["id"], delta=call.arguments),
                self._about("response.function_call_arguments.done", item_id=item["id"], name=call.name,
                            arguments=call.arguments),
                self._about("response.output_item.done", item=dict(item))]

    def finish(self, finished: Finished) -> list[Event]:
        """The answer ended: the open item closes, "incomplete" when max_output_tokens cut it off."""
        return self.close("incomplete" if finished.reason is FinishReason.LENGTH else "completed")

    def close(self, status: str = "completed") -> list[Event]:
        """End the open item, if any: `status` is "incomplete" when the answer was cut off in it."""
        if self._open is None:
            return []
        item, name = self.items[-1], _KINDS[self._open][3]
        self._open = None
        item["status"] = status
        part = item["content"][0]
        delta: dict[str, Any] = {"logprobs": []} if part["type"] == "output_text" else {}
        return [self._about(f"{name}.done", item_id=item["id"], content_index=0, text=part["text"], **delta),
                self._about("response.content_part.done", item_id=item["id"], content_index=0, part=dict(part)),
                self._about("response.output_item.done", item=copy.deepcopy(item))]

    def _about(self, kind: str, **fields: Any) -> Event:
        """An event about the last item (its output_index)."""
        return {"type": kind, "output_index": len(self.items) - 1, **fields}
