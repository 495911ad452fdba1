"""A generation as the routes run it: the prompt, the sampling (a tool call's grammar set), the answer reader. For chat,
the template's tool-call format decides how tools and history render (tools/prompt.py), the grammar of a call
(tools/grammar.py) and how calls are read from the answer (tools/parse.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog

from worker.api.generation_fields import ChatRequest, Generation
from worker.api.image_prompt import check_images_fit, decoded_images
from worker.api.images import ImageInput
from worker.api.media_links import read_links
from worker.api.problems import InvalidRequest, Problem
from worker.api.tools.answer import Answers, CallStream, PlainText
from worker.api.tools.formats import ToolFormat, detect
from worker.api.tools.grammar import call_grammar
from worker.api.tools.prompt import template_messages
from worker.api.tools.request import Tools
from worker.engine import ChatPrompt, GrammarTrigger, SamplingParams, SchemaProblem
from worker.settings import MediaSettings

if TYPE_CHECKING:
    from worker.engine import ServedModel

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Turn:
    prompt: ChatPrompt
    generation: Generation
    answers: Answers = PlainText


def _template_input(served: ServedModel, chat: ChatRequest) -> tuple[list[dict[str, Any]], list[dict] | None]:
    """The history and the tools on offer as the template's tool-call format shows them."""
    template, tools = served.prompts.template_source, chat.tools
    messages = template_messages(chat.messages, detect(template), template, tools)
    return messages, [f.as_tool() for f in tools.functions] if tools is not None else None


def chat_text(served: ServedModel, chat: ChatRequest) -> str:
    """The prompt's text, through the model's chat template."""
    messages, offered = _template_input(served, chat)
    return served.prompts.chat_text(messages, chat.template_kwargs, chat.prefill, offered)


def chat_turn(served: ServedModel, chat: ChatRequest, images: tuple[ImageInput, ...]) -> Turn:
    """`images`: the chat's images, each read (its links too)."""
    tools, fmt = chat.tools, detect(served.prompts.template_source)
    messages, offered = _template_input(served, chat)
    text = served.prompts.chat_text(messages, chat.template_kwargs, chat.prefill, offered)
    prompt = served.prompts.chat_prompt(text, decoded_images(served, images) if images else None)
    prompt = served.prompts.with_checkpoints(prompt, messages, chat.template_kwargs, offered)
    if images:
        check_images_fit(served, prompt, len(images))
    if tools is None:
        return Turn(prompt, chat.generation)
    log.debug("tools", format=fmt.name, functions=len(tools.functions), forced=tools.forced, only=tools.only)
    sampling = chat.generation.sampling
    if tools.forced:
        grammar = call_grammar(fmt, tools)
        if (why := served.prompts.grammar_problem(grammar)) is not None:  # the converter wrote GBNF llama.cpp refuses
            raise InvalidRequest([Problem("tools", "functions whose call grammar llama.cpp parses",
                                          f"tools: llama.cpp cannot use the grammar of a call: {why[:300]}")])
        sampling = replace(sampling, grammar=grammar)
    elif sampling.grammar is None:  # beside a request's own grammar, a call happens only where that allows one
        sampling = _lazy_calls(served, fmt, tools, sampling, chat.prefill)
    return Turn(prompt, replace(chat.generation, sampling=sampling), partial(CallStream, fmt.syntax))


async def prepared_turn(served: ServedModel, chat: ChatRequest, media: MediaSettings) -> Turn:
    """chat_turn, its image links read first (on the event loop: the engine never waits on a network), and on a
    worker thread when the turn has images: decoding them (stb_image) and resizing them (mtmd) would otherwise hold
    the event loop, and with it every running stream's next piece. libmtmd's decoding and tokenizing may run beside
    the engine thread's encoding, as llama-server runs them on its HTTP threads."""
    if chat.images:
        return await asyncio.to_thread(chat_turn, served, chat, await read_links(chat.images, media))
    return chat_turn(served, chat, ())


def _lazy_calls(served: ServedModel, fmt: ToolFormat, tools: Tools, sampling: SamplingParams,
                prefill: str) -> SamplingParams:
    """tool_choice auto: the answer is free, and a call it opens is constrained from its opening on.

    Where the calls' grammar cannot be had, calls are read as the model writes them, as before: auto never
    refuses a request for its schemas (forced calls do)."""
    if fmt.trigger_first and prefill.strip():  # the prefill opened the answer: no call can open it any more
        return sampling
    try:
        grammar = call_grammar(fmt, tools, lazy=True)
    except SchemaProblem as refused:  # a schema the converter cannot honor in full
        log.info("tool_call_grammar_skipped", why="; ".join(f"{where or 'parameters'}: {message}"
                                                             for where, message in refused.problems)[:300])
        return sampling
    if (why := served.prompts.grammar_problem(grammar)) is not None:
        log.warning("tool_call_grammar_skipped", why=why[:300])
        return sampling
    return replace(sampling, grammar=grammar, grammar_trigger=GrammarTrigger(fmt.trigger, fmt.trigger_first))
