"""A generation as the routes run it: the prompt, the sampling (a forced tool call's grammar set), the answer reader.

For chat, the template's tool-call format decides the rest: how the tools and the history render
(prompt.py), the grammar of a forced call (grammar.py), and how calls are read from the answer (parse.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import structlog

from worker.api.problems import InvalidRequest, Problem
from worker.api.schemas import ChatRequest, Generation
from worker.api.tools.answer import Answers, CallStream, PlainText
from worker.api.tools.formats import detect
from worker.api.tools.grammar import call_grammar
from worker.api.tools.prompt import template_messages
from worker.engine import ChatPrompt, Engine

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Turn:
    prompt: ChatPrompt
    generation: Generation
    answers: Answers = PlainText


def chat_turn(engine: Engine, chat: ChatRequest) -> Turn:
    template, tools = engine.chat.source, chat.tools
    fmt = detect(template)
    messages = template_messages(chat.messages, fmt, template, tools)
    offered = [f.as_tool() for f in tools.functions] if tools is not None else None
    prompt = engine.chat_prompt(messages, chat.template_kwargs, tools=offered)
    if tools is None:
        return Turn(prompt, chat.generation)
    log.debug("tools", format=fmt.name, functions=len(tools.functions), forced=tools.forced, only=tools.only)
    generation = chat.generation
    if tools.forced:
        grammar = call_grammar(fmt, tools)
        if (why := engine.grammar_problem(grammar)) is not None:  # the converter wrote GBNF llama.cpp refuses
            raise InvalidRequest([Problem("tools", "functions whose call grammar llama.cpp parses",
                                          f"tools: llama.cpp cannot use the grammar of a call: {why[:300]}")])
        generation = replace(generation, sampling=replace(generation.sampling, grammar=grammar))
    return Turn(prompt, generation, partial(CallStream, fmt.syntax))
