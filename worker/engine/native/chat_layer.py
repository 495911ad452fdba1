"""llama.cpp's chat layer, as llama-server uses it: a model's chat templates rendered by llama.cpp's own Jinja engine
(common/chat.cpp), the grammar, triggers, preserved tokens and stops a chat samples under, and the parser that reads
an answer back into reasoning, content and tool calls, whole or as it streams (common/chat-peg-parser.cpp,
common/parsers/). libcommon is C++ with no C API, so the worker builds a small one beside libllama
(native/chat_abi/chat_abi.cpp, libllm-worker-chat) and calls it here through ctypes, as llama-cpp-python calls
libllama: JSON text in, JSON text out.
"""

from __future__ import annotations

import ctypes
import json
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import llama_cpp

from worker.engine.errors import ChatTemplateError

LIBRARY = "llm-worker-chat"


class ChatLayerMissing(RuntimeError):
    """The build loaded has no chat ABI beside its libllama (a llama.cpp not built by scripts/build-llama-cpp)."""


@dataclass(frozen=True)
class Trigger:
    """Where a lazy grammar wakes, in llama.cpp's kinds: word (that text anywhere), pattern (a regex found anywhere;
    the grammar starts at its first non-empty group, else where it matched), pattern_full (a regex the whole answer
    so far matches)."""

    kind: str
    value: str


@dataclass(frozen=True)
class ChatParams:
    """A rendered chat and what its answer samples under and is read with: llama.cpp's common_chat_params."""

    prompt: str
    format: int  # the parser's format (common_chat_format)
    grammar: str  # GBNF of the tool calls' syntax, or ""; lazy: it starts at a trigger
    grammar_lazy: bool
    triggers: tuple[Trigger, ...]
    preserved_tokens: tuple[str, ...]  # control tokens the answer's text shows (the format's markers)
    additional_stops: tuple[str, ...]
    generation_prompt: str  # the template's opening of the answer, which the parser and the grammar begin with
    parser: str  # the answer's parser, serialized
    supports_thinking: bool
    thinking_start_tag: str
    thinking_end_tags: tuple[str, ...]

    @classmethod
    def of(cls, raw: dict[str, Any]) -> ChatParams:
        return cls(raw["prompt"], raw["format"], raw["grammar"], raw["grammar_lazy"],
                   tuple(Trigger(t["type"], t["value"]) for t in raw["grammar_triggers"]),
                   tuple(raw["preserved_tokens"]), tuple(raw["additional_stops"]), raw["generation_prompt"],
                   raw["parser"], raw["supports_thinking"], raw["thinking_start_tag"],
                   tuple(raw["thinking_end_tags"]))


@dataclass(frozen=True)
class Delta:
    """What one more piece of an answer adds to its message (llama.cpp's common_chat_msg_diff): reasoning, content,
    or a tool call's name (when it first shows) and a piece of its arguments."""

    reasoning: str = ""
    content: str = ""
    call: int = -1  # the tool call this delta belongs to; -1: none
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class Message:
    """An answer as the parser reads it whole."""

    content: str
    reasoning: str
    calls: tuple[tuple[str, str], ...]  # (name, arguments as JSON text)


class _Abi:
    """The C functions, typed once."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        text, handle, error = ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        signatures: dict[str, tuple[list[Any], Any]] = {
            "lwc_templates_init": ([ctypes.c_void_p, ctypes.c_char_p, error], handle),
            "lwc_templates_info": ([handle], text),
            "lwc_templates_apply": ([handle, ctypes.c_char_p], text),
            "lwc_stream_init": ([ctypes.c_char_p, error], handle),
            "lwc_stream_free": ([handle], None),
            "lwc_stream_feed": ([handle, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool, ctypes.c_bool], text),
            "lwc_free": ([ctypes.c_void_p], None),
        }
        for name, (argtypes, restype) in signatures.items():
            function = getattr(lib, name)
            function.argtypes, function.restype = argtypes, restype
        self.lib = lib

    def taken(self, pointer: int | None) -> Any:
        """A JSON answer, its buffer freed; {"error"} answers raise ChatTemplateError."""
        assert pointer, "the chat ABI returned no text (out of memory)"
        try:
            value = json.loads(ctypes.string_at(pointer).decode("utf-8"))
        finally:
            self.lib.lwc_free(pointer)
        if isinstance(value, dict) and "error" in value:
            raise ChatTemplateError(value["error"])
        return value

    def made(self, what: str, pointer: int | None, error: ctypes.c_void_p) -> int:
        """A handle, or the error the C side gave instead."""
        if pointer:
            return pointer
        message = ctypes.string_at(error.value).decode("utf-8", errors="replace") if error.value else "unknown error"
        if error.value:
            self.lib.lwc_free(error.value)
        raise ChatTemplateError(f"{what}: {message}")


def _file_name() -> str:
    return f"lib{LIBRARY}.dylib" if sys.platform == "darwin" else f"lib{LIBRARY}.so"


@cache
def _abi() -> _Abi:
    """The chat ABI beside the libllama this process loaded: built with it, it calls into that one."""
    libllama = Path(llama_cpp.llama_cpp._lib._name)
    path = libllama.parent / _file_name()
    if not path.is_file():
        raise ChatLayerMissing(
            f"{path.name} is not beside the libllama loaded ({libllama.parent}): that llama.cpp was not built by "
            "scripts/build-llama-cpp, which adds llama.cpp's chat layer for the worker; run make install (or "
            "llm-worker build-backend for a GPU), or point LLAMA_CPP_LIB_PATH at a build made so")
    return _Abi(path)


class ChatTemplates:
    """A model's chat templates in llama.cpp (its tokenizer.chat_template, and the tool_use variant where the GGUF has
    one), or `source` instead; BOS and EOS as the model's vocabulary writes them. Without a model (None), `source`
    alone and no BOS or EOS, as llama.cpp's own tests read its templates."""

    def __init__(self, model: llama_cpp.llama_model_p | None, source: str | None) -> None:
        self._abi = _abi()
        error = ctypes.c_void_p()
        self._handle = self._abi.made(
            "llama.cpp cannot read the chat template",
            self._abi.lib.lwc_templates_init(model, source.encode() if source else None, ctypes.byref(error)), error)
        info = self._abi.taken(self._abi.lib.lwc_templates_info(self._handle))
        self.source: str = info["source"]
        self.tool_use_source: str = info["tool_use_source"]
        self.caps: dict[str, bool] = info["caps"]

    def apply(self, inputs: dict[str, Any]) -> ChatParams:
        """A chat rendered as llama-server renders it (chat_abi.cpp lists `inputs`); ChatTemplateError with
        llama.cpp's words where the template or the chat layer refuses it."""
        raw = self._abi.taken(self._abi.lib.lwc_templates_apply(self._handle, json.dumps(inputs).encode()))
        return ChatParams.of(raw)


class AnswerParser:
    """One answer, read as it streams by llama.cpp's parser for its chat's format: each feed parses the whole answer
    so far again (llama.cpp's parsers are not incremental, as in llama-server) and returns what it adds."""

    def __init__(self, params: ChatParams, reasoning_format: str, continuation: bool, streamed: bool) -> None:
        self._abi = _abi()
        config = {"format": params.format, "parser": params.parser, "generation_prompt": params.generation_prompt,
                  "reasoning_format": reasoning_format, "is_continuation": continuation,
                  # deepseek-legacy leaves a streamed answer's reasoning in its content, as llama-server does
                  "reasoning_in_content": streamed and reasoning_format == "deepseek-legacy"}
        error = ctypes.c_void_p()
        self._handle = self._abi.made("llama.cpp cannot build the answer's parser",
                                      self._abi.lib.lwc_stream_init(json.dumps(config).encode(),
                                                                    ctypes.byref(error)), error)

    def feed(self, text: str, final: bool, with_message: bool = False) -> tuple[list[Delta], Message | None]:
        """The deltas `text` adds (partial while more may come); at the end (`final`), or when asked (`with_message`),
        the message so far too. ChatTemplateError where the answer does not read as the format (the parser keeps
        its last message)."""
        data = text.encode("utf-8")
        raw = self._abi.taken(self._abi.lib.lwc_stream_feed(self._handle, data, len(data), not final,
                                                                   with_message))
        deltas = [Delta(d["reasoning_content"], d["content"], d["index"], d["name"], d["arguments"])
                  for d in raw["diffs"]]
        message = raw.get("message")
        if message is None:
            return deltas, None
        return deltas, Message(message["content"], message["reasoning_content"],
                               tuple((call["name"], call["arguments"]) for call in message["tool_calls"]))

    def close(self) -> None:
        if self._handle:
            self._abi.lib.lwc_stream_free(self._handle)
            self._handle = 0
