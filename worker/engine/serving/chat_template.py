"""Chats -> prompt text and what the answer samples under, as llama-server makes them: the model's chat template (its
GGUF's, or a models.toml entry's) through llama.cpp's chat layer (native/chat_layer.py)."""

from __future__ import annotations

import time
from typing import Any

from worker.engine.errors import NoChatTemplate
from worker.engine.native.chat_layer import ChatParams, ChatTemplates
from worker.engine.native.model import LlamaModel
from worker.engine.requests import Chat

# The chat that asks a template whether it thinks, as llama.cpp's common_chat_templates_support_enable_thinking does.
_PROBE = Chat(({"role": "user", "content": "test"},))


class ChatTemplate:
    def __init__(self, templates: ChatTemplates | None, template_kwargs: dict[str, Any], reasoning_format: str) -> None:
        """`templates`: None where the model has none; `template_kwargs`: template variables under each request's
        (models.toml); `reasoning_format`: llama-server's --reasoning-format, under each request's."""
        self._templates = templates
        self.template_kwargs = template_kwargs
        self.reasoning_format = reasoning_format
        # Asked with thinking on, as llama.cpp's common_chat_templates_support_enable_thinking asks.
        self.thinks = self._templates is not None and self._templates.apply(
            self._inputs(_PROBE, True, True, thinking=True)).supports_thinking

    @classmethod
    def of(cls, model: LlamaModel, source: str | None, template_kwargs: dict[str, Any],
           reasoning_format: str) -> ChatTemplate:
        """The model's template (`source` instead of the GGUF's), with its BOS and EOS. A GGUF without one would get
        llama.cpp's ChatML, a chat the model never learned: it gets none, and chats say so."""
        given = source is not None or model.chat_template() is not None
        return cls(ChatTemplates(model.model, source) if given else None, template_kwargs, reasoning_format)

    @property
    def source(self) -> str | None:
        """The template's Jinja source (the tool_use variant's where the GGUF has one); None: the model has none."""
        if self._templates is None:
            return None
        return self._templates.source

    @property
    def caps(self) -> dict[str, bool]:
        """What llama.cpp's Jinja engine finds the template does: supports_tools, supports_tool_calls, ..."""
        return dict(self._templates.caps) if self._templates is not None else {}

    @property
    def shows_tools(self) -> bool:
        """The template shows the model the tools on offer, or the calls it made: tools mean something to it."""
        caps = self.caps
        return caps.get("supports_tools", False) or caps.get("supports_tool_calls", False)

    def render(self, chat: Chat, *, generation_prompt: bool = True, tools: bool = True) -> ChatParams:
        """The chat rendered as llama-server renders it, with the generation prompt (or, where the chat ends with an
        assistant message, continuing it), and what its answer samples under; `tools` False: as if none were
        offered (the answer's fallback reader, serving/chat_answer.py). NoChatTemplate where the model has none;
        ChatTemplateError with llama.cpp's words where the template refuses the chat."""
        if self._templates is None:
            raise NoChatTemplate(
                "this model's GGUF has no chat template (tokenizer.chat_template); give one in its models.toml entry "
                "(chat_template), or use /v1/completions with a prompt you format yourself")
        return self._templates.apply(self._inputs(chat, generation_prompt, tools, self.thinks))

    def _inputs(self, chat: Chat, generation_prompt: bool, tools: bool, thinking: bool) -> dict[str, Any]:
        """The chat in chat_abi.cpp's terms (llama-server's oaicompat_chat_params_parse, from its request body).
        `thinking`: whether a chat that does not say thinks, as llama-server's default is: on where the template
        thinks."""
        kwargs = {**self.template_kwargs, **chat.template_kwargs}
        enable_thinking = kwargs["enable_thinking"] is not False if "enable_thinking" in kwargs else thinking
        if chat.reasoning_effort == "none":  # OpenAI's "none": no reasoning at all
            enable_thinking = False
            kwargs.pop("reasoning_effort", None)
        elif chat.reasoning_effort is not None:
            kwargs["reasoning_effort"] = chat.reasoning_effort
        offered = list(chat.tools) if tools and chat.tools else None
        continues = chat.continues and generation_prompt
        return {
            "messages": list(chat.messages),
            "tools": offered,
            "tool_choice": chat.tool_choice if offered else "auto",
            "parallel_tool_calls": chat.parallel_tool_calls,
            "add_generation_prompt": generation_prompt and not continues,
            # A chat that ends with the assistant's message is continued, as llama-server's --prefill-assistant.
            **({"continue_final_message": True} if continues else {}),
            "reasoning_format": chat.reasoning_format or self.reasoning_format,
            "enable_thinking": enable_thinking,
            "chat_template_kwargs": kwargs,
            # The template's date (Llama 3's "Today Date") as llama-server would write it now.
            "now": int(time.time()),
        }
