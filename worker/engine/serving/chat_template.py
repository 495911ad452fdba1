"""Chat messages -> prompt text, with the model's own Jinja chat template from its GGUF."""

from __future__ import annotations

from typing import Any

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from worker.engine.errors import ChatTemplateError, NoChatTemplate
from worker.engine.output.reasoning import thinks


class ChatTemplate:
    def __init__(self, source: str | None, bos_text: str, eos_text: str) -> None:
        self.bos_text = bos_text
        self.source = source  # read for the tool-call format it speaks (worker.api.tools.formats)
        self.thinks = thinks(source)
        self._formatter = Jinja2ChatFormatter(source, eos_token=eos_text, bos_token=bos_text) if source else None

    def render(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any] | None = None,
               tools: list[dict[str, Any]] | None = None) -> str:
        """`template_kwargs`: extra template variables (e.g. enable_thinking), as chat_template_kwargs;
        `tools`: the template's `tools` variable (OpenAI's tool objects), None when none are offered."""
        if self._formatter is None:
            raise NoChatTemplate(
                "this model's GGUF has no chat template (tokenizer.chat_template); "
                "use /v1/completions with a prompt you format yourself"
            )
        try:
            return self._formatter(messages=messages, tools=tools, **(template_kwargs or {})).prompt
        except Exception as exc:  # jinja raises anything, including raise_exception() from templates
            raise ChatTemplateError(f"the chat template rejected the messages: {exc}") from None
