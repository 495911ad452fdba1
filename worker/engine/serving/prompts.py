"""The model's text side, as the API needs it before a request is queued: the chat template, the tokenizer, images
through the projector, and grammars checked against the vocabulary. Reads only the vocab, the template and the
projector, so any thread may call it (the API tokenizes off the event loop)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from worker.engine.constraints.grammar import grammar_problem
from worker.engine.native.model import LlamaModel
from worker.engine.native.projector import Bitmap, Projector
from worker.engine.output.reasoning import opens_in_prompt
from worker.engine.requests import ChatPrompt, Reasoning
from worker.engine.serving.chat_template import ChatTemplate


class Prompts:
    def __init__(self, model: LlamaModel, projector: Projector | None = None, chat_template: str | None = None,
                 template_kwargs: dict[str, Any] | None = None) -> None:
        self.model = model
        self.projector = projector  # None: text only (no --mmproj)
        self.chat = ChatTemplate(chat_template or model.chat_template(), bos_text=model.bos_text,
                                 eos_text=model.eos_text)
        self.template_kwargs = template_kwargs or {}  # a models.toml entry's, under each request's

    @property
    def template_source(self) -> str | None:
        """The chat template's Jinja source (the tool-call format is read from it); None: the model has none."""
        return self.chat.source

    @property
    def bos_text(self) -> str:
        """The BOS token's text ("" without one), as llama-server's /props names it."""
        return self.model.bos_text

    @property
    def eos_text(self) -> str:
        return self.model.eos_text

    @property
    def splits_reasoning(self) -> bool:
        """The model's replies are split into reasoning and answer (chat_prompt's condition)."""
        return self.chat.thinks and self.model.config.reasoning_format == "deepseek"

    @property
    def reads_images(self) -> bool:
        """A projector was loaded (--mmproj): prompts may hold images."""
        return self.projector is not None

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """What a prompt may hold, as llama-server's /v1/models says it: text, and image with a projector."""
        return self.projector.input_modalities if self.projector else ("text",)

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

    def chat_text(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any] | None = None,
                  prefill: str = "", tools: list[dict[str, Any]] | None = None) -> str:
        """The conversation through the chat template: the prompt's text.

        `template_kwargs`: extra template variables (chat_template_kwargs) over the model's own; `prefill`
        starts the answer for the model to continue (after the template's generation prompt); `tools`: the
        tools on offer."""
        return self.chat.render(messages, {**self.template_kwargs, **(template_kwargs or {})}, tools) + prefill

    def chat_prompt(self, prompt: str, images: list[Bitmap] | None = None) -> ChatPrompt:
        """A chat_text's tokens, and how to split the reply if the model thinks. `images`: one for each
        image_marker in the text, in order (decode_image's), tokenized by the projector."""
        # A template that writes BOS itself must not get a second one from the tokenizer.
        add_bos = self.model.add_bos and not prompt.startswith(self.chat.bos_text)
        reasoning = None
        if self.splits_reasoning:
            reasoning = Reasoning(opened_in_prompt=opens_in_prompt(prompt))
        if images:
            assert self.projector is not None  # the API refuses images without one (it names --mmproj)
            media = self.projector.tokenize(prompt, images, add_special=add_bos)
            return ChatPrompt(media.tokens, reasoning, media.spans)
        return ChatPrompt(self.model.tokenize(prompt, add_special=add_bos), reasoning)

    def with_checkpoints(self, prompt: ChatPrompt, messages: list[dict[str, Any]],
                         template_kwargs: dict[str, Any] | None = None,
                         tools: list[dict[str, Any]] | None = None) -> ChatPrompt:
        """The prompt with the positions a later prompt is likely to share it up to, for a model whose recurrent
        state can only go on from a checkpoint (native/memory.py): where its system prompt ends (another conversation
        with that system prompt), and where its last user message starts (that message edited, or its answer asked
        again with another): the messages before rendered alone share their tokens with the whole conversation's up
        to there. Unchanged where the memory cuts anywhere."""
        if self.model.memory_kind.cuts_anywhere:
            return prompt
        leading = next((i for i, message in enumerate(messages) if message.get("role") != "system"), len(messages))
        last_user = max((i for i, message in enumerate(messages) if message.get("role") == "user"), default=0)
        ends = []
        for before in sorted({leading, last_user} - {0, len(messages)}):
            rendered = self.chat_prompt(self.chat_text(messages[:before], template_kwargs, tools=tools)).tokens
            ends.append(len(os.path.commonprefix([rendered, prompt.tokens])))
        hints = tuple(end for end in ends if end)
        return replace(prompt, checkpoints=hints) if hints else prompt

    def decode_image(self, data: bytes) -> Bitmap:
        """An image's pixels, hashed for the cache; raises ImageUnreadable. Any thread (the API's)."""
        assert self.projector is not None  # the API refuses images without one
        return self.projector.decode_image(data)

    def grammar_problem(self, text: str) -> str | None:
        """Why llama.cpp would refuse `text` as a request's grammar, or None: checked before queueing, so the
        engine thread never meets a grammar it cannot build."""
        return grammar_problem(self.model.vocab, text)
