"""The answer as Anthropic's content blocks (thinking, text, tool_use), and the stream events that send them.

The whole message and the stream are built here from the same pieces in the same order, so a stream adds up to it.
"""

from __future__ import annotations

import json
from typing import Any

from worker.engine import Finished
from worker.engine import ToolCall as Call

Block = dict[str, Any]
Event = dict[str, Any]

# A kind of streamed content: its empty block, and its delta's type and text field.
_EMPTY = {"thinking": {"type": "thinking", "thinking": "", "signature": ""}, "text": {"type": "text", "text": ""}}
_DELTAS = {"thinking": ("thinking_delta", "thinking"), "text": ("text_delta", "text")}


def tool_use(call: Call) -> Block:
    """Anthropic names its call ids toolu_…; the input is the arguments' JSON object."""
    return {"type": "tool_use", "id": "toolu_" + call.id.removeprefix("call_"), "name": call.name,
            "input": json.loads(call.arguments)}


class Blocks:
    """The answer's content so far; each addition returns the events that stream it.

    A thinking or text block opens when its kind of content first comes and closes when another kind starts or the
    answer ends.
    """

    def __init__(self) -> None:
        self.content: list[Block] = []
        self._open = False  # the last block still takes deltas

    def add(self, kind: str, text: str) -> list[Event]:
        """Text of a kind (thinking or text): into the open block of that kind, or a new one."""
        if not text:
            return []
        events = []
        if not (self._open and self.content[-1]["type"] == kind):
            events = self.close()
            self.content.append(dict(_EMPTY[kind]))
            events.append({"type": "content_block_start", "index": len(self.content) - 1,
                           "content_block": _EMPTY[kind]})
            self._open = True
        delta_type, field = _DELTAS[kind]
        self.content[-1][field] += text
        return [*events, {"type": "content_block_delta", "index": len(self.content) - 1,
                          "delta": {"type": delta_type, field: text}}]

    # A tool_use block comes whole (calls are released once written whole), its input as one input_json_delta.
    def call(self, call: Call) -> list[Event]:
        events = self.close()
        block = tool_use(call)
        self.content.append(block)
        index = len(self.content) - 1
        return [*events, {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
                {"type": "content_block_delta", "index": index,
                 "delta": {"type": "input_json_delta", "partial_json": call.arguments}},
                {"type": "content_block_stop", "index": index}]

    def finish(self, finished: Finished) -> list[Event]:
        """The answer ended (however): its last block closes."""
        return self.close()

    def close(self) -> list[Event]:
        """End the open block, if any."""
        if not self._open:
            return []
        self._open = False
        return [{"type": "content_block_stop", "index": len(self.content) - 1}]
