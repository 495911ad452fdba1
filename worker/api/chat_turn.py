"""A generation as the routes run it: the prompt, the sampling (the tool calls' grammar set), the answer reader. A chat
is rendered by llama.cpp's chat layer as llama-server renders it (worker/engine/serving/prompts.py): the template's
prompt, the grammar and triggers of its tool calls, the control tokens its answer shows, its stops, and the parser
that reads the answer back into reasoning, content and tool calls.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import structlog

from worker.api.generation_fields import ChatRequest, Generation
from worker.api.image_prompt import check_images_fit, decoded_images
from worker.api.images import ImageInput
from worker.api.media_links import read_links
from worker.api.problems import InvalidRequest, Problem
from worker.engine import Answers, Chat, ChatPrompt, PlainText
from worker.settings import MediaSettings

if TYPE_CHECKING:
    from worker.engine import ServedModel

log = structlog.get_logger(__name__)

_MISTRAL_ID = re.compile(r"[a-zA-Z0-9]{9}")


@dataclass(frozen=True)
class Turn:
    prompt: ChatPrompt
    generation: Generation
    answers: Answers = PlainText
    preserved_tokens: frozenset[int] = frozenset()  # control tokens the answer's text shows


def as_chat(served: ServedModel, chat: ChatRequest) -> Chat:
    """The request as the chat template takes it. A reasoning effort goes to a template that reads it (gpt-oss);
    elsewhere it stands for a reasoning budget (api/reasoning_budgets.py), and "none" turns thinking off in both."""
    tools = chat.tools
    reads_effort = served.prompts.chat.caps.get("supports_reasoning_effort", False)
    effort = chat.reasoning_effort if chat.reasoning_effort == "none" or reads_effort else None
    return Chat(tuple(_template_messages(served, chat.messages)),
                tools=tuple(f.as_tool() for f in tools.functions) if tools else (),
                tool_choice=tools.choice if tools else "auto", only=tools.only if tools else None,
                parallel_tool_calls=tools.parallel if tools else True, template_kwargs=chat.template_kwargs,
                reasoning_effort=effort, reasoning_format=chat.reasoning_format)


def chat_turn(served: ServedModel, chat: ChatRequest, images: tuple[ImageInput, ...]) -> Turn:
    """`images`: the chat's images, each read (its links too)."""
    tools = chat.tools
    if tools is not None and tools.choice != "none" and not served.prompts.chat.shows_tools:
        raise InvalidRequest([Problem("tools", "a model whose chat template shows tools", "this model's chat "
                                      "template shows the model neither tools nor tool calls, so it cannot call them: "
                                      "send no tools (or tool_choice none), or serve the model with a template that "
                                      "has tool calling (its models.toml entry's chat_template)")])
    sampling = chat.generation.sampling
    asked = as_chat(served, chat)
    ready = served.prompts.chat_turn(asked, decoded_images(served, images) if images else None,
                                     own_grammar=sampling.grammar is not None)
    if images:
        check_images_fit(served, ready.prompt, len(images))
    if ready.grammar_refused is not None:
        if tools is not None and tools.forced:
            raise InvalidRequest([Problem("tools", "functions whose call grammar llama.cpp parses",
                                          f"tools: llama.cpp cannot use the grammar of a call: "
                                          f"{ready.grammar_refused[:300]}")])
        log.warning("tool_call_grammar_skipped", why=ready.grammar_refused[:300])
    if ready.grammar is not None:
        sampling = replace(sampling, grammar=ready.grammar, grammar_triggers=ready.triggers,
                           grammar_prefill=ready.grammar_prefill)
    if tools is not None:
        log.debug("tools", functions=len(tools.functions), choice=tools.choice, only=tools.only,
                  grammar="lazy" if ready.triggers else "whole" if ready.grammar else "none")
    if asked.reasoning_effort not in (None, "none"):
        sampling = replace(sampling, reasoning_budget=None)  # the template bounds the thinking itself
    generation = replace(chat.generation, sampling=sampling, stop=chat.generation.stop + ready.stop)
    return Turn(ready.prompt, generation, ready.answers, ready.preserved_tokens)


def chat_text(served: ServedModel, chat: ChatRequest) -> str:
    """The prompt's text, through the model's chat template (/apply-template's)."""
    return served.prompts.chat_text(as_chat(served, chat))


async def prepared_turn(served: ServedModel, chat: ChatRequest, media: MediaSettings) -> Turn:
    """chat_turn, its image links read first (on the event loop: the engine never waits on a network), and on a
    worker thread when the turn has images: decoding them (stb_image) and resizing them (mtmd) would otherwise hold
    the event loop, and with it every running stream's next piece. libmtmd's decoding and tokenizing may run beside
    the engine thread's encoding, as llama-server runs them on its HTTP threads."""
    if chat.images:
        return await asyncio.to_thread(chat_turn, served, chat, await read_links(chat.images, media))
    return chat_turn(served, chat, ())


def _template_messages(served: ServedModel, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as OpenAI sends it, which llama.cpp's chat layer reads. Mistral's templates accept only
    9-letter-or-digit tool call ids: other ids (ours are call_…) are mapped to one, the same each time."""
    if "[TOOL_CALLS]" not in (served.prompts.template_source or ""):
        return messages
    return [_with_mistral_ids(message) for message in messages]


def _with_mistral_ids(message: dict[str, Any]) -> dict[str, Any]:
    if "tool_calls" in message:
        return {**message, "tool_calls": [{**call, "id": _mistral_id(call["id"])} for call in message["tool_calls"]]}
    if message["role"] == "tool":
        return {**message, "tool_call_id": _mistral_id(message["tool_call_id"])}
    return message


def _mistral_id(call_id: str) -> str:
    return call_id if _MISTRAL_ID.fullmatch(call_id) else hashlib.sha256(call_id.encode()).hexdigest()[:9]
