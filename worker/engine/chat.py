"""Chat messages -> prompt text, with the model's own Jinja chat template from its GGUF."""

from __future__ import annotations

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from worker.errors import WorkerError


class NoChatTemplate(WorkerError):
    pass


class ChatTemplateError(WorkerError):
    """The template refused the conversation (e.g. roles out of order): the client's fault."""


class ChatTemplate:
    def __init__(self, source: str | None, bos_text: str, eos_text: str) -> None:
        self.bos_text = bos_text
        self._formatter = Jinja2ChatFormatter(source, eos_token=eos_text, bos_token=bos_text) if source else None

    def render(self, messages: list[dict[str, str]]) -> str:
        if self._formatter is None:
            raise NoChatTemplate(
                "this model's GGUF has no chat template (tokenizer.chat_template); "
                "use /v1/completions with a prompt you format yourself"
            )
        try:
            return self._formatter(messages=messages).prompt
        except Exception as exc:  # jinja raises anything, including raise_exception() from templates
            raise ChatTemplateError(f"the chat template rejected the messages: {exc}") from None
