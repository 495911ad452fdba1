"""The real chat templates llama.cpp ships (models/templates/ in the llama.cpp llama-cpp-python vendors, which make
install unpacks into the build cache), and what a model writes in each one's own format: the oracle the chat layer's
tests read calls from."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import REPO
from worker.engine.requests import Chat

if TYPE_CHECKING:
    from worker.engine.serving.chat_template import ChatTemplate

_VERSION = re.search(r'"llama-cpp-python==([^"]+)"', (REPO / "pyproject.toml").read_text())[1]  # type: ignore[index]
_CACHE = Path(os.environ.get("LLM_WORKER_BUILD_CACHE", Path.home() / ".cache" / "llm-worker" / "llama.cpp"))
VENDORED = _CACHE / f"llama_cpp_python-{_VERSION}" / "vendor" / "llama.cpp" / "models" / "templates"
TEMPLATES = sorted(path.stem for path in VENDORED.glob("*.jinja"))


def template(name: str) -> str:
    return (VENDORED / f"{name}.jinja").read_text()


WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                         "parameters": WEATHER}}
USER = {"role": "user", "content": "What is the weather in Paris?"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "123456789", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
RESULT = {"role": "tool", "tool_call_id": "123456789", "content": '{"temperature": 21, "sky": "sunny"}'}

# Where a template's own rendering of an assistant's call is not what its model writes, the format as llama.cpp's
# tests/test-chat.cpp writes it: LFM2's templates list tools but write no calls back, Command R+ renders a call
# otherwise than it asks for one, Apriel 1.6 ends its reasoning with a marker its rendering leaves out, granite 3.3
# renders no call at all (its models write granite 3.x's).
WRITTEN = {
    "LFM2-8B-A1B": '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>',
    "LFM2.5-Instruct": '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>',
    "CohereForAI-c4ai-command-r-plus-tool_use":
        'Action:\n```json\n[{"tool_name": "get_weather", "parameters": {"city": "Paris"}}]\n```',
    "ibm-granite-granite-3.3-2B-Instruct": '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    "Apriel-1.6-15b-Thinker-fixed":
        'Sunny?\n[BEGIN FINAL RESPONSE]\n<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
        '</tool_calls>',
}
# A thought, for templates whose generation prompt opens the reasoning: a model closes it before it calls.
THOUGHT = "Sunny?"
# A turn's end: control tokens that end a message, which a model writes as an end-of-generation token (never text):
# those that are no marker of the format, and these, which some formats list beside their markers.
_TAG_AT_END = re.compile(r"<[^<>]*>$")
_END_OF_TURN = ("<｜end▁of▁sentence｜>",)


def written_call(params_prompt: str, generation_prompt: str, thinking: tuple[str, tuple[str, ...]],
                 preserved: tuple[str, ...], with_call: str, with_text: str) -> str | None:
    """What a model writes after `generation_prompt` to make CALL, from the template's own rendering of it.

    `params_prompt`: the chat up to the generation prompt; `with_call` and `with_text`: the chat with CALL and with
    a plain answer ("XYZZY") appended, rendered without a generation prompt. The assistant's message is what the
    rendering with the call adds, less the end of turn it shares with the plain answer and the control tokens that
    end a turn; from it, what the generation prompt already wrote is left out (a template that opens the reasoning
    there is closed first, after a short thought)."""
    head = params_prompt[:len(params_prompt) - len(generation_prompt)]
    if not params_prompt.endswith(generation_prompt) or not with_call.startswith(head):
        return None
    message, other = with_call[len(head):], with_text[len(head):]
    shared = len(os.path.commonprefix([message[::-1], other[::-1]]))
    message = message[:len(message) - shared]
    if message.rfind("<") > message.rfind(">"):  # the shared end began inside a tag: the tag is the end's
        message = message[:message.rfind("<")]
    message = message.rstrip()
    while (tag := _TAG_AT_END.search(message)) and (tag.group() in _END_OF_TURN or (
            tag.group() not in preserved and not tag.group().startswith("</"))):
        message = message[:tag.start()].rstrip()
    start, ends = thinking
    opening = generation_prompt.split(start)[0] if start and start in generation_prompt else generation_prompt
    if not message.startswith(opening):
        return None
    written, unsaid = message[len(opening):], generation_prompt[len(opening):]
    if written.startswith(unsaid):
        return written[len(unsaid):]
    if start and start in unsaid:  # the generation prompt opened the reasoning: the model thinks, then closes it
        written = written[len(start):] if written.startswith(start) else written
        closed = written.lstrip().startswith(ends[0].strip())
        return THOUGHT + (written.lstrip() if closed else ends[0] + written.lstrip())
    return written


def row(name: str, chat: ChatTemplate) -> tuple[str, str, str, str, str]:
    """docs/models.md's row for a template: its name, whether its calls are read (and the format), its reasoning tags,
    and whether it takes enable_thinking and reasoning_effort."""
    asked = chat.render(Chat((USER,), tools=(TOOL,)))
    calls = "yes" if chat.shows_tools else "no: shows no tools"
    if calls == "yes" and not asked.grammar_lazy:
        calls = "yes, unconstrained"
    reasoning = (f"`{asked.thinking_start_tag}` … `{asked.thinking_end_tags[0].strip()}`"
                 if asked.supports_thinking and asked.thinking_end_tags else "none")
    quiet = chat.render(Chat((USER,), template_kwargs={"enable_thinking": False}))
    thinking = chat.render(Chat((USER,), template_kwargs={"enable_thinking": True}))
    thinking_off = "yes" if quiet.prompt != thinking.prompt else "no"
    effort = "yes" if chat.caps.get("supports_reasoning_effort") else "no"
    return f"`{name}`", calls, reasoning.replace("|", "\\|"), thinking_off, effort


if __name__ == "__main__":  # docs/models.md's table: python -m tests.chat_templates
    from worker.engine.native.chat_layer import ChatTemplates
    from worker.engine.serving.chat_template import ChatTemplate

    for name in TEMPLATES:
        print("| " + " | ".join(row(name, ChatTemplate(ChatTemplates(None, template(name)), {}, "deepseek"))) + " |")
