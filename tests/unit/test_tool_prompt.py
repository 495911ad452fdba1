"""Tool calling without a model: the tools, calls and results of a history rendered into a Hermes-style template,
the generic fallback prompt on a template without tools, and Mistral's call ids."""

from __future__ import annotations

import json

from tests.tools_helpers import HERMES_TEMPLATE, HISTORY, WEATHER
from worker.api.tools.formats import GENERIC_FORMAT, HERMES_FORMAT, MISTRAL_FORMAT
from worker.api.tools.prompt import CALL_FORM, template_messages
from worker.api.tools.request import Function, Tools
from worker.engine.serving.chat_template import ChatTemplate

# SmolLM2's own template: ChatML that knows nothing of tools.
CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                   "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                   "{% endif %}")


def test_the_hermes_template_renders_tools_calls_and_results():
    tools = Tools((Function("get_weather", "The weather", WEATHER),), forced=False, only=None, parallel=True)
    messages = template_messages(_history(), HERMES_FORMAT, HERMES_TEMPLATE, tools)
    prompt = ChatTemplate(HERMES_TEMPLATE, "", "").render(messages, tools=[f.as_tool() for f in tools.functions])
    assert json.dumps(tools.functions[0].as_tool()) in prompt
    # the arguments reach the template as an object, as Hugging Face templates expect them
    assert ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n'
            '</tool_call>') in prompt
    assert '<tool_response>\n{"temperature": 21, "sky": "sunny"}\n</tool_response>' in prompt


def test_a_template_without_tools_gets_the_fallback_prompt():
    tools = Tools((Function("get_weather", "The weather", WEATHER),), forced=False, only=None, parallel=True)
    messages = template_messages(_history(), GENERIC_FORMAT, CHATML_TEMPLATE, tools)
    prompt = ChatTemplate(CHATML_TEMPLATE, "", "").render(messages)
    system = prompt.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n") and CALL_FORM in system
    assert json.dumps({"name": "get_weather", "description": "The weather", "parameters": WEATHER}) in system
    assert ('<|im_start|>assistant\n{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", '
            '"unit": "celsius"}}]}<|im_end|>') in prompt
    assert ('<|im_start|>user\n{"tool_response": {"tool_call_id": "call_1", "name": "get_weather", "content": '
            '"{\\"temperature\\": 21, \\"sky\\": \\"sunny\\"}"}}<|im_end|>') in prompt


def test_mistral_gets_call_ids_its_template_accepts():
    messages = template_messages(_history(), MISTRAL_FORMAT, "{{ message.tool_calls }}[TOOL_CALLS]", None)
    mapped = messages[1]["tool_calls"][0]["id"]
    assert len(mapped) == 9 and mapped.isalnum() and messages[2]["tool_call_id"] == mapped


def _history() -> list[dict]:
    """HISTORY as parse_chat hands it on."""
    return [{**m, "content": m["content"] or ""} for m in HISTORY]
