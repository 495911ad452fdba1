"""Tool calling on the real model: with a Hermes-style template that lists tools itself, and with the model's
own template (no tool support: the generic fallback). Arguments are checked from outside with jsonschema."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

import aiohttp
import jsonschema
import llama_cpp
import numpy as np
import openai
import pytest
from pydantic import BaseModel, Field
from structlog.testing import capture_logs

from tests.conftest import template_worker
from worker.api.tools.answer import CallStream
from worker.api.tools.formats import GENERIC_FORMAT, HERMES_FORMAT, LLAMA_3_FORMAT, MISTRAL_FORMAT, ToolFormat
from worker.api.tools.grammar import call_grammar
from worker.api.tools.prompt import CALL_FORM, template_messages
from worker.api.tools.request import Function, Tools
from worker.engine.prompt.chat_template import ChatTemplate
from worker.engine.constraints.grammar import grammar_problem
from worker.engine.native.model import EngineConfig, LlamaModel
from worker.engine.requests import GrammarTrigger, SamplingParams
from worker.engine.output.sampler import Sampler

# Qwen 2.5's tool layout, cut down: the tools in the system turn, calls in <tool_call> tags, results as
# <tool_response> in a user turn.
HERMES_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}
{% endif %}
{%- for tool_call in message.tool_calls %}<tool_call>
{"name": "{{ tool_call.function.name }}", "arguments": {{ tool_call.function.arguments | tojson }}}
</tool_call>
{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
# SmolLM2's own template: ChatML that knows nothing of tools.
CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                   "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                   "{% endif %}")

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "The time in a city now",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0, "max_tokens": 120}
HISTORY = [*ASK,
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21, "sky": "sunny"}'}]


@pytest.fixture(scope="module")
def hermes_worker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    worker = template_worker(tmp_path_factory.mktemp("hermes"), model_path, "hermes", HERMES_TEMPLATE,
                             "--parallel", "2")
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


@pytest.fixture(params=["hermes", "own_template"])
async def chat(request, hermes_worker, worker):
    """(client, model id) on the Hermes-template worker, then on the shared worker with the model's own template."""
    served = hermes_worker if request.param == "hermes" else worker
    client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
    model = (await client.models.list()).data[0].id
    return client, model


def _checked(calls) -> list[tuple[str, str]]:
    """Each call is well-formed and its arguments validate against its function's parameters."""
    assert calls, "no tool call"
    for call in calls:
        assert call.id.startswith("call_") and call.type == "function"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return [(call.function.name, call.function.arguments) for call in calls]


async def test_required_returns_a_call_whose_arguments_validate(chat):
    client, model = chat
    response = await client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="required",
                                                     parallel_tool_calls=False, **GREEDY)
    choice = response.choices[0]
    assert len(_checked(choice.message.tool_calls)) == 1
    assert choice.finish_reason == "tool_calls" and choice.message.content is None


async def test_a_named_function_is_the_one_called(chat):
    client, model = chat
    response = await client.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}},
        **GREEDY)
    assert {name for name, _ in _checked(response.choices[0].message.tool_calls)} == {"get_time"}


async def test_the_streamed_call_reassembles_to_the_whole_one(chat):
    client, model = chat
    body = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, **GREEDY)
    whole = (await client.chat.completions.create(**body)).choices[0]
    calls: dict[int, dict] = {}
    content, finish = "", None
    async for chunk in await client.chat.completions.create(**body, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                if delta.index not in calls:  # a call opens with its id, type and name, arguments still empty
                    assert delta.id.startswith("call_") and delta.type == "function" and delta.function.name
                    assert delta.function.arguments == ""
                    calls[delta.index] = {"name": delta.function.name, "arguments": ""}
                calls[delta.index]["arguments"] += delta.function.arguments or ""
    assert [(c["name"], c["arguments"]) for c in calls.values()] == _checked(whole.message.tool_calls)
    assert (content, finish) == ("", whole.finish_reason) == ("", "tool_calls")


class Address(BaseModel):
    city: str = Field(max_length=20)
    country: Literal["FR", "DE", "IT"]


class Parcel(BaseModel):
    to: Address
    express: bool


async def test_arguments_of_a_pydantic_schema_with_references_validate(chat):
    client, model = chat
    schema = Parcel.model_json_schema()
    assert "$defs" in schema  # the nested model is a reference
    tools = [{"type": "function", "function": {"name": "ship", "parameters": schema}}]
    response = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Send a parcel to Rome, express."}], tools=tools,
        tool_choice="required", parallel_tool_calls=False, **GREEDY)
    [call] = response.choices[0].message.tool_calls
    assert call.function.name == "ship"
    Parcel.model_validate_json(call.function.arguments)
    jsonschema.validate(json.loads(call.function.arguments), schema)


async def test_a_history_with_a_tool_result_renders_and_answers(chat):
    client, model = chat
    response = await client.chat.completions.create(model=model, messages=HISTORY, tools=TOOLS, **GREEDY)
    choice = response.choices[0]
    assert choice.message.content or choice.message.tool_calls
    assert choice.finish_reason == ("tool_calls" if choice.message.tool_calls else choice.finish_reason)
    assert choice.finish_reason in ("stop", "length", "tool_calls")


async def test_tool_choice_none_answers_in_text(chat):
    client, model = chat
    plain = await client.chat.completions.create(model=model, messages=ASK, **GREEDY)
    none = await client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="none", **GREEDY)
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content == plain.choices[0].message.content  # the tools are left out


def test_the_hermes_template_renders_tools_calls_and_results():
    tools = Tools((Function("get_weather", "The weather", WEATHER),), forced=False, only=None, parallel=True)
    messages = template_messages(_history(), HERMES_FORMAT, HERMES_TEMPLATE, tools)
    prompt = ChatTemplate(HERMES_TEMPLATE, "", "").render(messages, tools=[f.as_tool() for f in tools.functions])
    assert json.dumps(tools.functions[0].as_tool()) in prompt
    # the arguments reach the template as an object, as Hugging Face templates expect them
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>' in prompt
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


# uniqueItems is refused by the grammar converter
UNIQUE = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}
BAD = [
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
     "tools[0].function.parameters"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_news"}}},
     "tool_choice.function.name"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": UNIQUE}}], "tool_choice": "required"},
     "tools[0].function.parameters.properties.tags.uniqueItems"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"parallel_tool_calls": "yes", "tools": TOOLS}, "parallel_tool_calls"),
    ({"messages": [*ASK, {"role": "tool", "content": "21 degrees"}]}, "messages[1].tool_call_id"),
    ({"messages": [*ASK, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Paris"}}}]}]}, "messages[1].tool_calls[0].function.arguments"),
    ({"functions": [{"name": "get_weather"}]}, "functions"),
]


@pytest.mark.parametrize("extra, field", BAD, ids=[field for _, field in BAD])
async def test_bad_tools_are_400_naming_the_field(base_url, extra, field):
    body = {"messages": ASK, "max_tokens": 4, **extra}
    async with aiohttp.ClientSession() as http, http.post(base_url + "/v1/chat/completions", json=body) as response:
        assert response.status == 400, await response.text()
        error = (await response.json())["error"]
    assert field in [problem["field"] for problem in error["errors"]], error


# tool_choice auto: the lazy grammar. First on the engine's sampler alone, in this process, the model's first
# tokens scripted (their logits raised far above the rest) as if it had written them.

CHATML_ASK = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
ONE_CALL = Tools((Function("get_weather", "The weather in a city now", WEATHER),), forced=False, only=None,
                 parallel=False)
FREE = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def llama(model_path: Path):
    model = LlamaModel(model_path, EngineConfig(parallel=1, ctx_size=1024))
    yield model
    model.close()


def _lazy(llama: LlamaModel, fmt: ToolFormat, base: SamplingParams = FREE) -> SamplingParams:
    grammar = call_grammar(fmt, ONE_CALL, lazy=True)
    assert grammar_problem(llama.vocab, grammar) is None
    return replace(base, grammar=grammar, grammar_trigger=GrammarTrigger(fmt.trigger, fmt.trigger_first))


def _tokens(llama: LlamaModel, text: str) -> list[int]:
    return llama.tokenize(text, add_special=False, parse_special=False)


def _generate(llama: LlamaModel, params: SamplingParams, script: Sequence[int] = (), reasoning: int = 0,
              max_tokens: int = 40) -> list[int]:
    """The tokens sampled after CHATML_ASK, the first ones `script`'s, the first `reasoning` of them sampled as a
    thinking model's reasoning (unconstrained), as the runner samples them; an end-of-generation token ends it."""
    llama_cpp.llama_memory_clear(llama.memory, True)
    prompt = llama.tokenize(CHATML_ASK, add_special=False)
    sampler = Sampler(params, llama.vocab, llama.n_vocab, prompt)
    out: list[int] = []
    batch = prompt
    try:
        while len(out) < max_tokens:
            assert llama_cpp.llama_decode(llama.ctx, llama_cpp.llama_batch_get_one(
                (llama_cpp.llama_token * len(batch))(*batch), len(batch))) == 0
            if len(out) < len(script):
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama.ctx, -1), shape=(llama.n_vocab,))
                logits[script[len(out)]] = logits.max() + 100
            token = sampler.sample(llama.ctx, -1, constrained=len(out) >= reasoning)
            assert token is not None
            out.append(token)
            if llama.is_eog(token):
                break
            batch = [token]
    finally:
        sampler.free()
    return out


def _text(llama: LlamaModel, tokens: list[int]) -> str:
    return b"".join(map(llama.piece, tokens)).decode()


@pytest.mark.parametrize("base", [FREE, SamplingParams(temperature=0.8, seed=7)], ids=["greedy", "sampled"])
def test_asleep_the_lazy_grammar_changes_nothing(llama, base):
    free = _generate(llama, base)
    assert "<tool_call>" not in _text(llama, free)
    assert _generate(llama, _lazy(llama, HERMES_FORMAT, base)) == free


@pytest.mark.parametrize("fmt, opening, content", [
    (HERMES_FORMAT, "Sure. <tool_call>", "Sure."),
    (HERMES_FORMAT, "x.<tool_call>", "x."),  # the trigger starts inside the token ".<"
    (GENERIC_FORMAT, 'I will check. {"tool_calls"', "I will check."),
    (LLAMA_3_FORMAT, ' {"name"', ""),
    (MISTRAL_FORMAT, '[{"name"', ""),  # what follows [TOOL_CALLS], a control token the engine does not write
], ids=["hermes", "hermes_inside_a_token", "generic", "llama3", "mistral"])
def test_a_call_the_model_opens_is_finished_valid(llama, fmt, opening, content):
    script = _tokens(llama, opening)
    free = _text(llama, _generate(llama, FREE, script, max_tokens=60))
    assert not _called(fmt, free)  # left alone, this model does not finish the call
    tokens = _generate(llama, _lazy(llama, fmt), script, max_tokens=60)
    assert llama.is_eog(tokens[-1])  # the grammar ended the answer once the call was whole
    text = _text(llama, tokens[:-1])
    assert text.startswith(opening)
    release = _read(fmt, text)
    assert release.text == content
    [call] = release.calls
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def _read(fmt: ToolFormat, text: str):
    answer = CallStream(fmt.syntax)
    return answer.feed(text) + answer.finish()


def _called(fmt: ToolFormat, text: str) -> bool:
    calls = _read(fmt, text).calls
    try:
        return bool(calls) and all(jsonschema.validate(json.loads(c.arguments), WEATHER) is None for c in calls)
    except jsonschema.ValidationError:
        return False


def test_a_trigger_further_on_than_the_opening_is_text(llama):
    script = _tokens(llama, 'Hi {"name"')
    assert _generate(llama, _lazy(llama, LLAMA_3_FORMAT), script) == _generate(llama, FREE, script)


def test_text_the_grammar_refuses_after_the_trigger_leaves_the_answer_free(llama):
    """One token writes the trigger's end and more: ">," after "<tool_call". Replayed, the grammar refuses the
    comma before accepting it: no abort (llama.cpp's own lazy grammar aborts the process here), a warning, and
    the answer goes on exactly as without a grammar."""
    [closing] = _tokens(llama, ">,")
    script = _tokens(llama, "<tool_call") + [closing]
    with capture_logs() as logs:
        tokens = _generate(llama, _lazy(llama, HERMES_FORMAT), script)
    assert tokens == _generate(llama, FREE, script)
    [dropped] = [log for log in logs if log["event"] == "lazy_grammar_dropped"]
    assert dropped["written"] == "<tool_call>,"


def test_a_grammar_no_token_fits_is_dropped(llama):
    """No token spells NUL: once awake, the grammar allows nothing, and the answer goes on free (no error)."""
    params = SamplingParams(temperature=0, grammar='root ::= "<tool_call>" "\\x00"',
                            grammar_trigger=GrammarTrigger("<tool_call>"))
    script = _tokens(llama, "<tool_call>")
    with capture_logs() as logs:
        tokens = _generate(llama, params, script)
    assert tokens == _generate(llama, FREE, script)
    assert [log["why"] for log in logs if log["event"] == "lazy_grammar_dropped"] == ["the grammar allows no token here"]


def test_reasoning_is_not_the_answer(llama):
    """A thinking model's reasoning is sampled unconstrained: a trigger there wakes nothing, and an opening
    trigger counts where the answer opens, after it."""
    script = _tokens(llama, "<tool_call>")
    hermes = _lazy(llama, HERMES_FORMAT)
    assert _generate(llama, hermes, script, reasoning=len(script)) == _generate(llama, FREE, script)
    thought = _tokens(llama, "Let me think.")
    tokens = _generate(llama, _lazy(llama, LLAMA_3_FORMAT), thought + _tokens(llama, '{"name"'), len(thought), 60)
    assert llama.is_eog(tokens[-1])
    [call] = _read(LLAMA_3_FORMAT, _text(llama, tokens[len(thought):-1])).calls
    jsonschema.validate(json.loads(call.arguments), WEATHER)


# Then through the API: under auto, on the Hermes template, this seed makes the model open a call by itself.
# Sampled freely that call came out as {"celsius": 35.7, "fahrenheit": 86.7} (missing city and unit) followed by
# text; under the lazy grammar its arguments validate.
CALL_ME = {"messages": [{"role": "user", "content": "Call get_weather for Paris in celsius."}], "tools": TOOLS,
           "temperature": 0.8, "seed": 3, "max_tokens": 80, "parallel_tool_calls": False}


async def test_auto_a_call_the_model_opens_validates(hermes_worker):
    client = openai.AsyncOpenAI(base_url=hermes_worker.url + "/v1", api_key="unused", max_retries=0)
    model = (await client.models.list()).data[0].id
    choice = (await client.chat.completions.create(model=model, **CALL_ME)).choices[0]
    assert [name for name, _ in _checked(choice.message.tool_calls)] == ["get_weather"]
    assert choice.finish_reason == "tool_calls"


async def test_auto_streamed_equals_whole(hermes_worker):
    client = openai.AsyncOpenAI(base_url=hermes_worker.url + "/v1", api_key="unused", max_retries=0)
    model = (await client.models.list()).data[0].id
    whole = (await client.chat.completions.create(model=model, **CALL_ME)).choices[0]
    calls: dict[int, dict] = {}
    content, finish = "", None
    async for chunk in await client.chat.completions.create(model=model, **CALL_ME, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"name": delta.function.name, "arguments": ""})
                call["arguments"] += delta.function.arguments or ""
    assert [(c["name"], c["arguments"]) for c in calls.values()] == _checked(whole.message.tool_calls)
    assert (content or None, finish) == (whole.message.content, whole.finish_reason)


async def test_auto_with_a_schema_no_grammar_honors_answers(base_url, http):
    """UNIQUE is a 400 for a forced call (see BAD); under auto the calls are then read as written, as before."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": UNIQUE}}]
    async with http.post(base_url + "/v1/chat/completions",
                         json={"messages": ASK, "tools": tools, "max_tokens": 4}) as response:
        assert response.status == 200, await response.text()
