"""A thinking model's reasoning apart from its answer, on a real worker (tests/unit/test_reasoning.py: the engine's
phase alone; tests/model/test_chat_templates.py: the reasoning of the templates llama.cpp ships)."""

from __future__ import annotations

from pathlib import Path

import anthropic
import ollama
import openai
import pytest

from tests.conftest import template_worker

# ChatML written as thinking models' templates are (Qwen3's, GLM's): the reasoning opened in the generation prompt
# unless enable_thinking is false, earlier reasoning shown in <think> tags, which is how llama.cpp's chat layer finds
# the tags. (The real ones open it after a newline, where the test model does not copy the text below.)
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and m['reasoning_content'] %}<think>{{ m['reasoning_content'] }}</think>{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is not defined or enable_thinking %}<think>{% else %}<think></think>{% endif %}{% endif %}"
)
# Greedy SmolLM2 copies this text, so its output closes the reasoning the template opened.
COPY = [{"role": "user", "content": "Copy this text exactly: <think>Let me see.</think>The answer is 4."}]


@pytest.fixture(scope="module")
def thinking_worker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    worker = template_worker(tmp_path_factory.mktemp("thinking"), model_path, "thinker", THINKING_TEMPLATE,
                             "--parallel", "2")
    yield worker
    worker.stop()


@pytest.fixture
def client(thinking_worker):
    return openai.AsyncOpenAI(base_url=thinking_worker.url + "/v1", api_key="unused", max_retries=0)


async def test_reasoning_content_apart_from_content(client):
    whole = await client.chat.completions.create(model="thinker", messages=COPY, temperature=0, max_tokens=40)
    message = whole.choices[0].message
    assert message.model_extra["reasoning_content"] == "Let me see."
    assert message.content == "The answer is 4."

    stream = await client.chat.completions.create(model="thinker", messages=COPY, temperature=0, max_tokens=40,
                                                  stream=True)
    reasoning, content = "", ""
    async for chunk in stream:
        for choice in chunk.choices:
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            content += choice.delta.content or ""
    assert (reasoning, content) == ("Let me see.", "The answer is 4.")


def test_anthropic_messages_answer_with_a_thinking_block_first(thinking_worker):
    client = anthropic.Anthropic(base_url=thinking_worker.url, api_key="unused")
    ask = dict(model="thinker", messages=COPY, max_tokens=40, extra_body={"temperature": 0})
    blocks = lambda message: [(b.type, b.thinking if b.type == "thinking" else b.text)  # noqa: E731
                              for b in message.content]
    whole = client.messages.create(**ask)
    assert blocks(whole) == [("thinking", "Let me see."), ("text", "The answer is 4.")]
    with client.messages.stream(**ask) as stream:
        kinds = [event.delta.type for event in stream if event.type == "content_block_delta"]
        final = stream.get_final_message()
    assert blocks(final) == blocks(whole) and kinds[0] == "thinking_delta" and kinds[-1] == "text_delta"


def test_ollama_chat_and_generate_answer_with_the_thinking_apart(thinking_worker):
    client = ollama.Client(host=thinking_worker.url)
    greedy = {"temperature": 0, "num_predict": 40}
    whole = client.chat(model="thinker", messages=COPY, think=True, options=greedy)
    assert (whole.message.thinking, whole.message.content) == ("Let me see.", "The answer is 4.")
    chunks = list(client.chat(model="thinker", messages=COPY, options=greedy, stream=True))
    assert "".join(c.message.thinking or "" for c in chunks) == "Let me see."
    assert "".join(c.message.content for c in chunks) == "The answer is 4."
    generated = client.generate(model="thinker", prompt=COPY[0]["content"], think=True, options=greedy)
    assert (generated.thinking, generated.response) == ("Let me see.", "The answer is 4.")
    # think false: the end of thinking is written at once, and the answer follows
    quick = client.chat(model="thinker", messages=COPY, think=False, options=greedy)
    assert not quick.message.thinking and quick.message.content


async def test_chat_template_kwargs_turn_thinking_off(client):
    whole = await client.chat.completions.create(model="thinker", messages=COPY, temperature=0, max_tokens=40,
                                                 extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    message = whole.choices[0].message
    assert "reasoning_content" not in (message.model_extra or {})
    assert message.content and "Let me see." not in message.content


async def test_stop_strings_do_not_cut_the_reasoning(client):
    whole = await client.chat.completions.create(model="thinker", messages=COPY, temperature=0, max_tokens=40,
                                                 stop=["see", "is"])
    message = whole.choices[0].message
    assert message.model_extra["reasoning_content"] == "Let me see."
    assert message.content == "The answer " and whole.choices[0].finish_reason == "stop"


async def test_bad_chat_template_kwargs_is_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="thinker", messages=COPY, max_tokens=4,
                                             extra_body={"chat_template_kwargs": ["enable_thinking"]})
    assert "chat_template_kwargs" in str(caught.value)


def _thinker_worker(tmp: Path, model_path: Path, entry: str, *flags: str):
    return template_worker(tmp, model_path, "thinker", THINKING_TEMPLATE, "--parallel", "1", *flags, entry=entry)


def _answer(worker, **extra):
    client = openai.OpenAI(base_url=worker.url + "/v1", api_key="unused", max_retries=0)
    return client.chat.completions.create(model="thinker", messages=COPY, temperature=0, max_tokens=40,
                                          **extra).choices[0].message


def test_reasoning_format_none_leaves_the_text_as_written(model_path, tmp_path):
    worker = _thinker_worker(tmp_path, model_path, "", "--reasoning-format", "none")
    try:
        message = _answer(worker)
        # As llama-server: the tag the template opened the reasoning with leads it, so the text reads whole.
        assert message.content == "<think>Let me see.</think>The answer is 4."
        assert "reasoning_content" not in (message.model_extra or {})
    finally:
        worker.stop()


def test_models_toml_template_kwargs_sit_under_the_request(model_path, tmp_path):
    worker = _thinker_worker(tmp_path, model_path, "chat_template_kwargs = { enable_thinking = false }\n")
    try:
        assert "reasoning_content" not in (_answer(worker).model_extra or {})
        thinking = _answer(worker, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        assert thinking.model_extra["reasoning_content"] == "Let me see."
    finally:
        worker.stop()


async def test_a_grammar_constrains_the_answer_not_the_reasoning(client):
    whole = await client.chat.completions.create(model="thinker", messages=COPY, temperature=0, max_tokens=40,
                                                 extra_body={"grammar": 'root ::= "yes" | "no"'})
    message = whole.choices[0].message
    assert message.model_extra["reasoning_content"] == "Let me see."
    assert message.content in ("yes", "no") and whole.choices[0].finish_reason == "stop"
