"""Anthropic's Messages API on the real model, through the unmodified `anthropic` SDK, and x-api-key auth;
tools on a Hermes-style template and on the model's own (the fallback prompt), checked against the chat route."""

import json

import anthropic
import jsonschema
import openai
import pytest

from tests.conftest import start_worker, template_worker
from tests.helpers import completion_text, counts_its_input, openai_once
from tests.tools_helpers import QWEN_TEMPLATE, SCHEMAS, TOOLS

MODEL = "smollm2-135m-instruct"
# The SDK has no sampling arguments any more (current Claude models take none); clients send them as extra fields.
GREEDY = {"extra_body": {"temperature": 0}}
SYSTEM = "You are a terse assistant."
MESSAGES = [
    {"role": "user", "content": "Name a fruit."},
    {"role": "assistant", "content": [{"type": "text", "text": "Apple."}]},
    {"role": "user", "content": [{"type": "text", "text": "Tell me a story "},
                                 {"type": "text", "text": "about it. 🍎"}]},
]
AS_CHAT = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Name a fruit."},
    {"role": "assistant", "content": "Apple."},
    {"role": "user", "content": "Tell me a story about it. 🍎"},
]


def chat_text(base_url: str, messages: list[dict], max_tokens: int) -> tuple[str, str, dict]:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused")
    answer = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens)
    return answer.choices[0].message.content, answer.choices[0].finish_reason, answer.usage


def test_sdk_answers_as_chat_does_streamed_and_not(base_url):
    client = anthropic.Anthropic(base_url=base_url, api_key="unused")
    expected, finish, usage = chat_text(base_url, AS_CHAT, 48)
    whole = client.messages.create(model=MODEL, system=SYSTEM, messages=MESSAGES, max_tokens=48, **GREEDY)
    assert whole.id.startswith("msg_") and whole.type == "message" and whole.role == "assistant"
    assert whole.model == MODEL and [block.type for block in whole.content] == ["text"]
    assert whole.content[0].text == expected and expected
    assert whole.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[finish] and whole.stop_sequence is None
    assert whole.usage.input_tokens + whole.usage.cache_read_input_tokens == usage.prompt_tokens
    assert whole.usage.output_tokens == usage.completion_tokens
    system_blocks = [{"type": "text", "text": SYSTEM}]
    with client.messages.stream(model=MODEL, system=system_blocks, messages=MESSAGES, max_tokens=48,
                                **GREEDY) as stream:
        deltas = [event.delta.text for event in stream if event.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "".join(deltas) == stream.get_final_text() == expected and len(deltas) > 1
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == usage.prompt_tokens


def test_stream_sends_anthropics_event_sequence(base_url):
    client = anthropic.Anthropic(base_url=base_url, api_key="unused")
    with client.messages.with_streaming_response.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, stream=True) as response:
        lines = [line for line in response.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    datas = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert [d["type"] for d in datas] == names
    deltas = names.count("content_block_delta")
    assert names == ["message_start", "ping", "content_block_start", *["content_block_delta"] * deltas,
                     "content_block_stop", "message_delta", "message_stop"] and deltas >= 1
    start = datas[0]["message"]
    assert start["content"] == [] and start["usage"]["output_tokens"] == 0 and start["usage"]["input_tokens"] > 0
    assert datas[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert datas[-2]["usage"]["output_tokens"] == 8


def test_stop_sequences_end_the_turn_and_name_the_match(base_url):
    client = anthropic.Anthropic(base_url=base_url, api_key="unused")
    ask = dict(model=MODEL, messages=[{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
               max_tokens=64, **GREEDY)
    free = client.messages.create(**ask).content[0].text
    assert "4" in free  # the stop below is in the free text, so it must cut it there
    stopped = client.messages.create(**ask, stop_sequences=["4"])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "4"
    assert stopped.content[0].text == free[:free.index("4")]
    with client.messages.stream(**ask, stop_sequences=["4"]) as stream:
        assert stream.get_final_text() == stopped.content[0].text
        assert stream.get_final_message().stop_reason == "stop_sequence"


async def test_a_final_assistant_message_is_continued(http, base_url):
    """Prefill: the answer continues the assistant's text, exactly as a completion of the rendered prompt does."""
    question = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
    prefill = "Sure: 1, 2, 3,"
    body = {"messages": [*question, {"role": "assistant", "content": prefill}], "max_tokens": 16, "temperature": 0}
    async with http.post(base_url + "/v1/messages", json=body) as response:
        assert response.status == 200, await response.text()
        answer = await response.json()
    async with http.post(base_url + "/apply-template", json={"messages": question}) as response:
        prompt = (await response.json())["prompt"]
    completion = await openai_once(http, base_url + "/v1/completions",
                                   {"prompt": prompt + prefill, "max_tokens": 16, "temperature": 0})
    continued = answer["content"][0]["text"]
    assert continued == completion_text(completion) and continued and not continued.startswith(prefill)
    usage = answer["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == completion["usage"]["prompt_tokens"]


async def test_an_empty_final_assistant_message_is_a_turn_of_its_own(http, base_url):
    """Nothing to continue: the template renders it, the answer opens the next turn. A chat of that message alone is
    answered on every chat route (it rendered no prompt at all when continued, a 400; the fuzzer found it)."""
    question = [{"role": "user", "content": "Say hi."}]
    empty = {"role": "assistant", "content": ""}
    async with http.post(base_url + "/apply-template", json={"messages": [*question, empty]}) as response:
        prompt = (await response.json())["prompt"]
    async with http.post(base_url + "/apply-template", json={"messages": question}) as response:
        opened = (await response.json())["prompt"]
    assert prompt.startswith(opened[:-len("<|im_start|>assistant\n")]) and prompt.endswith("<|im_start|>assistant\n")
    assert len(prompt) > len(opened)  # the empty turn is in it
    for route, body in (("/v1/messages", {"messages": [empty], "max_tokens": 2}),
                        ("/v1/chat/completions", {"messages": [{**empty, "tool_calls": []}], "max_tokens": 2}),
                        ("/api/chat", {"messages": [empty], "stream": False, "options": {"num_predict": 2}})):
        async with http.post(base_url + route, json=body) as response:
            assert response.status == 200, (route, await response.text())


async def test_bad_input_lists_every_problem_in_anthropics_shape(http, base_url):
    body = {
        "model": MODEL, "temperature": 1.5, "top_k": -1, "stop_sequences": "x",
        "tools": [{"name": "t"}, {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "tool", "name": "nope"},
        "system": [{"type": "image", "source": {}}, {"type": {"not": "a name"}}], "metadata": "m",
        "thinking": {"type": "enabled", "budget_tokens": 2048}, "output_config": {"format": {"type": "json_schema"}},
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "tool_result"},
                                         {"type": "tool_use", "id": "1", "name": "t", "input": {}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "1", "name": "t", "input": "{}"}]},
        ],
    }
    async with http.post(base_url + "/v1/messages", json=body) as response:
        assert response.status == 400
        answer = await response.json()
    assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    message = answer["error"]["message"]
    for expected in ["tools[0].input_schema: input_schema is required",
                     "tools[1].type: 'web_search_20250305' tools are not supported",
                     "tool_choice.name: tool_choice names 'nope'", "thinking:", "output_config.format:",
                     "system[0]: image blocks belong in user messages", "system[1]: a content block must be",
                     "metadata must", "messages[0].role:", "messages[1].content[1].tool_use_id: a tool_result block",
                     "messages[1].content[2]: tool_use blocks belong in assistant messages",
                     "messages[2].content[0].input: a tool_use block's input must be an object",
                     "max_tokens is required", "temperature must", "top_k must", "stop_sequences must"]:
        assert expected in message, expected
    assert message.count("; ") == 15


async def test_refusals_after_parsing_keep_anthropics_shape(http, base_url):
    hi = {"messages": [{"role": "user", "content": "Hi"}]}
    cases = [({**hi, "max_tokens": 5000}, 400, "invalid_request_error", "lower max_tokens"),
             ({**hi, "max_tokens": 4, "model": "claude-x"}, 404, "not_found_error", "claude-x")]
    for body, status, kind, words in cases:
        async with http.post(base_url + "/v1/messages", json=body) as response:
            answer = await response.json()
        assert response.status == status and answer["error"]["type"] == kind, answer
        assert words in answer["error"]["message"]
    async with http.post(base_url + "/v1/messages", data=b"{nope") as response:
        assert response.status == 400 and (await response.json())["type"] == "error"


def test_sdk_raises_bad_request_with_the_message(base_url):
    client = anthropic.Anthropic(base_url=base_url, api_key="unused")
    with pytest.raises(anthropic.BadRequestError, match="top_p must satisfy 0 <= top_p <= 1"):
        client.messages.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                               extra_body={"top_p": 2})


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, model_path):
    worker = start_worker(tmp_path_factory.mktemp("keyed"), "--model", str(model_path),
                          "--parallel", "1", "--ctx-size", "512", "--api-key", "sekrit")
    yield worker
    assert worker.stop() == 0


async def test_x_api_key_is_accepted_beside_bearer_on_every_route(http, keyed):
    routes = [("GET", "/v1/models", None), ("POST", "/tokenize", {"content": "Hi"}),
              ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 1}),
              ("POST", "/v1/messages", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})]
    for method, path, body in routes:
        for headers, expected in [({"x-api-key": "sekrit"}, 200), ({"Authorization": "Bearer sekrit"}, 200),
                                  ({"x-api-key": "wrong"}, 401), ({}, 401)]:
            async with http.request(method, keyed.url + path, json=body, headers=headers) as response:
                assert response.status == expected, (path, headers)
                if expected == 401:
                    refusal = await response.json()
                    assert refusal["type"] == "error" and refusal["error"]["type"] == "authentication_error"


def test_sdk_authenticates_with_x_api_key(keyed, model_path):
    ask = dict(model=model_path.stem, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    answer = anthropic.Anthropic(base_url=keyed.url, api_key="sekrit").messages.create(**ask)
    assert answer.usage.output_tokens == 4
    with pytest.raises(anthropic.AuthenticationError) as refused:
        anthropic.Anthropic(base_url=keyed.url, api_key="wrong").messages.create(**ask)
    # The SDK's parsed body, not its message: anthropic 2.x no longer puts the body's code in the message.
    assert refused.value.status_code == 401 and "INVALID_API_KEY" in json.dumps(refused.value.body), refused.value.body


# Tools: the same functions as the chat tool tests, in Anthropic's shape.
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]
ONE_CALL = {"type": "any", "disable_parallel_tool_use": True}
TOOL_HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                       "input": {"city": "Paris", "unit": "celsius"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                  "content": [{"type": "text", "text": '{"temperature": 21, "sky": "sunny"}'}]}]},
]
AS_CHAT_HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "toolu_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": '{"temperature": 21, "sky": "sunny"}'},
]


@pytest.fixture(scope="module")
def qwen(model_path, tmp_path_factory):
    worker = template_worker(tmp_path_factory.mktemp("qwen"), model_path, "qwen", QWEN_TEMPLATE)
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


@pytest.fixture
def served(qwen) -> tuple[str, str]:
    """(base url, model id): the test model served with Qwen 2.5's template, which has tool calls."""
    return qwen.url, "qwen"


def test_count_tokens_counts_the_tools_as_the_template_shows_them(served):
    url, model = served
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    tools = [{"name": tool["function"]["name"], "description": tool["function"]["description"],
              "input_schema": tool["function"]["parameters"]} for tool in TOOLS]
    counts_its_input(client, model, system="You are terse.", tools=tools)


def _uses(message) -> list[tuple[str, dict]]:
    """The message's tool_use blocks, each checked: its id, and its input against the tool's schema."""
    uses = [block for block in message.content if block.type == "tool_use"]
    for block in uses:
        assert block.id.startswith("toolu_")
        jsonschema.validate(block.input, SCHEMAS[block.name])
    return [(block.name, block.input) for block in uses]


# The answer opens a call: a final assistant message is continued (Anthropic's prefill), as chat's is.
ASK_A_CALL = [{"role": "user", "content": "What is the weather in Paris?"},
              {"role": "assistant", "content": "<tool_call>\n"}]


def test_a_forced_tool_use_is_the_chat_routes_call(served):
    url, model = served
    client = anthropic.Anthropic(base_url=url, api_key="unused")
    whole = client.messages.create(model=model, messages=ASK_A_CALL, tools=ANTHROPIC_TOOLS, tool_choice=ONE_CALL,
                                   max_tokens=120, **GREEDY)
    uses = _uses(whole)
    assert uses and whole.stop_reason in ("tool_use", "max_tokens")
    chat = openai.OpenAI(base_url=url + "/v1", api_key="unused").chat.completions.create(
        model=model, messages=ASK_A_CALL, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        temperature=0, max_tokens=120)
    calls = chat.choices[0].message.tool_calls
    assert uses == [(call.function.name, json.loads(call.function.arguments)) for call in calls]
    with client.messages.stream(model=model, messages=ASK_A_CALL, tools=ANTHROPIC_TOOLS, tool_choice=ONE_CALL,
                                max_tokens=120, **GREEDY) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert _uses(final) == uses and final.stop_reason == whole.stop_reason
    assert [block.type for block in final.content] == [block.type for block in whole.content]
    assert "input_json" in events  # the SDK's event for an input_json_delta


def test_a_named_tool_is_the_one_used(served):
    url, model = served
    answer = anthropic.Anthropic(base_url=url, api_key="unused").messages.create(
        model=model, messages=ASK_A_CALL, tools=ANTHROPIC_TOOLS, tool_choice={"type": "tool", "name": "get_time"},
        max_tokens=120, **GREEDY)
    assert {name for name, _ in _uses(answer)} == {"get_time"}


def test_a_history_with_tool_use_and_result_answers_as_chat_does(served):
    url, model = served
    answer = anthropic.Anthropic(base_url=url, api_key="unused").messages.create(
        model=model, messages=TOOL_HISTORY, tools=ANTHROPIC_TOOLS, max_tokens=48, **GREEDY)
    chat = openai.OpenAI(base_url=url + "/v1", api_key="unused").chat.completions.create(
        model=model, messages=AS_CHAT_HISTORY, tools=TOOLS, temperature=0, max_tokens=48).choices[0]
    texts = [block.text for block in answer.content if block.type == "text"]
    assert "".join(texts) == (chat.message.content or "")
    assert [(n, json.dumps(i)) for n, i in _uses(answer)] == [
        (c.function.name, json.dumps(json.loads(c.function.arguments))) for c in chat.message.tool_calls or []]
    assert answer.stop_reason == {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}[
        chat.finish_reason]


def test_tool_choice_none_reads_no_tool_use(served):
    """As llama-server: the tools are shown, and the answer is not read for calls."""
    url, model = served
    none = anthropic.Anthropic(base_url=url, api_key="unused").messages.create(
        model=model, messages=ASK_A_CALL, max_tokens=32, tools=ANTHROPIC_TOOLS, tool_choice={"type": "none"}, **GREEDY)
    assert [block.type for block in none.content] == ["text"]
