"""The model's text side, as the API needs it before a request is queued: chats through the chat template and what
their answers sample under and are read with, the tokenizer, images through the projector, and grammars checked
against the vocabulary. Reads only the vocab, the templates and the projector, so any thread may call it (the API
tokenizes off the event loop)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from worker.engine.answer import Answers
from worker.engine.constraints.grammar import grammar_problem
from worker.engine.native.chat_layer import ChatParams
from worker.engine.native.model import LlamaModel
from worker.engine.native.projector import Bitmap, Projector
from worker.engine.requests import Chat, ChatPrompt, ExtraFile, GrammarTrigger, Reasoning
from worker.engine.serving.chat_answer import ChatAnswer
from worker.engine.serving.chat_template import ChatTemplate
from worker.engine.serving.infill import infill_tokens


@dataclass(frozen=True)
class ChatTurn:
    """A chat made ready for the engine: its prompt, and what its answer samples under and is read with."""

    prompt: ChatPrompt
    text: str  # the prompt's text (/apply-template's)
    stop: tuple[str, ...]  # the format's own stops, beside the request's
    preserved_tokens: frozenset[int]  # control tokens the answer's text shows (the format's markers)
    # The tool calls' grammar (None: none, or one the request's own grammar replaces, or one llama.cpp refused:
    # `grammar_refused` says why), lazy when it has triggers; grammar_prefill as SamplingParams'.
    grammar: str | None
    triggers: tuple[GrammarTrigger, ...]
    grammar_prefill: tuple[int, ...] | None
    grammar_refused: str | None
    answers: Answers


def _answer(params: ChatParams, reasoning_format: str, continuation: bool,
            without_tools: Callable[[], ChatParams] | None, streamed: bool) -> ChatAnswer:
    return ChatAnswer(params, reasoning_format, continuation, without_tools, streamed)


class Prompts:
    def __init__(self, model: LlamaModel, projector: Projector | None = None, chat_template: str | None = None,
                 template_kwargs: dict[str, Any] | None = None, reasoning_format: str = "deepseek") -> None:
        self.model = model
        self.projector = projector  # None: text only (no --mmproj)
        # A models.toml entry's template and variables, under each request's.
        self.chat = ChatTemplate.of(model, chat_template, template_kwargs or {}, reasoning_format)

    @property
    def template_source(self) -> str | None:
        """The chat template's Jinja source; None: the model has none."""
        return self.chat.source

    @property
    def thinks(self) -> bool:
        """The chat template writes a thinking model's reasoning (llama.cpp finds its tags): a budget can end it."""
        return self.chat.thinks

    @property
    def bos_text(self) -> str:
        """The BOS token's text ("" without one), as llama-server's /props names it."""
        return self.model.bos_text

    @property
    def eos_text(self) -> str:
        return self.model.eos_text

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """What a prompt may hold, as llama-server's /v1/models says it: text, and image or audio by the projector."""
        return self.projector.input_modalities if self.projector else ("text",)

    @property
    def sample_rate(self) -> int:
        """The rate clips are decoded at (their samples over it are their seconds); 0 without an audio projector."""
        return self.projector.sample_rate if self.projector and self.projector.audio else 0

    def tokenize(self, text: str) -> list[int]:
        """A prompt's tokens, with BOS where the model asks for one."""
        return self.model.tokenize(text, add_special=self.model.add_bos)

    def tokens(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        """Text as llama.cpp tokenizes it with these switches (llama-server's /tokenize)."""
        return self.model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def token_bytes(self, token: int) -> bytes:
        return self.model.token_bytes(token)

    def detokenize(self, tokens: list[int]) -> bytes:
        return self.model.detokenize(tokens)

    def chat_text(self, chat: Chat) -> str:
        """The chat through the chat template, generation prompt included: the prompt's text."""
        return self.chat.render(chat).prompt

    def infill(self, prefix: str, suffix: str, extra: tuple[ExtraFile, ...] = (), prompt: str = "") -> list[int]:
        """A fill-in-the-middle prompt's tokens (serving/infill.py); NoInfill for a model without FIM tokens."""
        return infill_tokens(self.model, prefix, suffix, extra, prompt)

    def tokenize_chat(self, text: str) -> list[int]:
        """A chat template's text as its prompt's tokens: BOS where the model asks for one and the text has none."""
        return self._tokens(text, None, None).tokens

    def chat_turn(self, chat: Chat, images: list[Bitmap] | None = None, own_grammar: bool = False) -> ChatTurn:
        """The chat rendered and tokenized (`images`: one for each MEDIA_MARKER in its messages, in order), with the
        grammar, triggers, preserved tokens and stops llama.cpp's chat layer gives its answer, and its reader.
        `own_grammar`: the request constrains its answer itself (a grammar or JSON response_format beside tools
        auto): the tool calls' grammar is left out, and calls are read where that grammar lets them be."""
        params = self.chat.render(chat)
        # A named tool_choice: the prompt shows every tool, the grammar and the reader the one it names.
        reading = params if chat.only is None else self.chat.render(
            replace(chat, tools=tuple(tool for tool in chat.tools if tool["function"]["name"] == chat.only)))
        prompt = self._tokens(params.prompt, images, self._reasoning(reading))
        grammar, triggers, prefill, refused = self._grammar(reading, own_grammar)
        reasoning_format = chat.reasoning_format or self.chat.reasoning_format
        without_tools = partial(self.chat.render, replace(chat, tools=())) if chat.tools else None
        answers = partial(_answer, reading, reasoning_format, chat.continues, without_tools)
        return ChatTurn(self._with_checkpoints(prompt, chat), params.prompt, reading.additional_stops,
                        self._preserved(reading), grammar, triggers, prefill, refused, answers)

    def _tokens(self, text: str, images: list[Bitmap] | None, reasoning: Reasoning | None) -> ChatPrompt:
        # A template that writes BOS itself must not get a second one from the tokenizer.
        add_bos = self.model.add_bos and not text.startswith(self.model.bos_text)
        if images:
            assert self.projector is not None  # the API refuses images without one (it names --mmproj)
            media = self.projector.tokenize(text, images, add_special=add_bos)
            return ChatPrompt(media.tokens, reasoning, media.spans)
        return ChatPrompt(self.model.tokenize(text, add_special=add_bos), reasoning)

    def _reasoning(self, params: ChatParams) -> Reasoning | None:
        """Where the answer's reasoning starts and ends, for a template that thinks."""
        if not (params.supports_thinking and params.thinking_start_tag and params.thinking_end_tags):
            return None
        start = params.thinking_start_tag
        end_tokens = self.model.tokenize(params.thinking_end_tags[0], add_special=False, parse_special=True)
        return Reasoning(start, params.thinking_end_tags, params.generation_prompt.rstrip().endswith(start),
                         tuple(end_tokens))

    def _preserved(self, params: ChatParams) -> frozenset[int]:
        """The format's markers that are one control token each, as llama-server keeps them in the answer's text."""
        ids = (self.model.tokenize(text, add_special=False, parse_special=True) for text in params.preserved_tokens)
        return frozenset(tokens[0] for tokens in ids if len(tokens) == 1)

    def _grammar(self, params: ChatParams, own_grammar: bool) -> tuple[
            str | None, tuple[GrammarTrigger, ...], tuple[int, ...] | None, str | None]:
        """The tool calls' grammar as llama.cpp's chat layer gives it: lazy, from its triggers on (tool_choice
        auto); or the whole output's, from the template's opening of the answer, which it takes first (required)."""
        if not params.grammar or own_grammar:
            return None, (), None, None
        if (why := grammar_problem(self.model.vocab, params.grammar)) is not None:
            return None, (), None, why
        if params.grammar_lazy:
            return params.grammar, tuple(GrammarTrigger(t.kind, t.value) for t in params.triggers), None, None
        prefill = self.model.tokenize(params.generation_prompt, add_special=False, parse_special=True)
        return params.grammar, (), tuple(prefill), None

    def _with_checkpoints(self, prompt: ChatPrompt, chat: Chat) -> ChatPrompt:
        """The prompt with the positions a later prompt is likely to share it up to, for a model whose recurrent
        state can only go on from a checkpoint (native/memory.py): where its system prompt ends (another conversation
        with that system prompt), and where its last user message starts (that message edited, or its answer asked
        again with another): the messages before rendered alone share their tokens with the whole conversation's up
        to there. Unchanged where the memory cuts anywhere."""
        if self.model.memory_kind.cuts_anywhere:
            return prompt
        messages = chat.messages
        leading = next((i for i, message in enumerate(messages) if message.get("role") != "system"), len(messages))
        last_user = max((i for i, message in enumerate(messages) if message.get("role") == "user"), default=0)
        ends = []
        for before in sorted({leading, last_user} - {0, len(messages)}):
            text = self.chat.render(replace(chat, messages=messages[:before]), generation_prompt=False).prompt
            rendered = self.tokenize_chat(text)
            ends.append(len(os.path.commonprefix([rendered, prompt.tokens])))
        hints = tuple(end for end in ends if end)
        return replace(prompt, checkpoints=hints) if hints else prompt

    def decode(self, data: bytes, audio: bool) -> Bitmap:
        """An image's pixels or a clip's samples, hashed for the cache; raises MediaUnreadable. Any thread (the
        API's)."""
        assert self.projector is not None  # prepare refuses media without one
        return self.projector.decode(data, audio)

    def grammar_problem(self, text: str) -> str | None:
        """Why llama.cpp would refuse `text` as a request's grammar, or None: checked before queueing, so the
        engine thread never meets a grammar it cannot build."""
        return grammar_problem(self.model.vocab, text)
