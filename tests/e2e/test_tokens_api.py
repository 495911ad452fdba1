"""/tokenize, /detokenize and /apply-template on the real model, in llama-server's shapes."""

import pytest

from tests.helpers import completion_text, openai_once

TEXTS = ["héllo wörld", "Smile 😀 and 🎉!", "日本語のテキスト、中文文本",
         "<|im_start|>user\nHi<|im_end|>"]
CONVERSATION = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France? 🇫🇷"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Japan (日本)?"},
]


async def post(http, url: str, body: dict) -> tuple[int, dict]:
    async with http.post(url, json=body) as response:
        return response.status, await response.json()


@pytest.mark.parametrize("text", TEXTS)
async def test_tokenize_then_detokenize_gives_the_text_back(http, base_url, text):
    status, tokenized = await post(http, base_url + "/tokenize", {"content": text})
    assert status == 200 and tokenized["tokens"] and all(isinstance(t, int) for t in tokenized["tokens"])
    status, detokenized = await post(http, base_url + "/detokenize", {"tokens": tokenized["tokens"]})
    assert status == 200 and detokenized == {"content": text}


async def test_special_tokens_are_parsed_unless_told_not_to(http, base_url):
    text = "<|im_start|>user"
    _, parsed = await post(http, base_url + "/tokenize", {"content": text})
    _, literal = await post(http, base_url + "/tokenize", {"content": text, "parse_special": False})
    assert len(parsed["tokens"]) < len(literal["tokens"])
    _, back = await post(http, base_url + "/detokenize", {"tokens": literal["tokens"]})
    assert back["content"] == text


async def test_pieces_are_text_or_the_bytes_of_a_split_character(http, base_url):
    text = "A 😀 and 語"
    _, plain = await post(http, base_url + "/tokenize", {"content": text})
    status, body = await post(http, base_url + "/tokenize", {"content": text, "with_pieces": True})
    assert status == 200 and [t["id"] for t in body["tokens"]] == plain["tokens"]
    pieces = [t["piece"] for t in body["tokens"]]
    # SmolLM2 spells the emoji and the CJK character in byte tokens that are not UTF-8 alone.
    assert any(isinstance(p, list) for p in pieces) and any(isinstance(p, str) for p in pieces)
    raw = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in pieces)
    assert raw.decode("utf-8") == text


async def test_add_special_follows_the_vocab(http, base_url):
    # SmolLM2 does not add BOS, so asking for special tokens changes nothing; asking is still accepted.
    _, without = await post(http, base_url + "/tokenize", {"content": "Hi"})
    _, with_special = await post(http, base_url + "/tokenize", {"content": "Hi", "add_special": True})
    assert without == with_special


async def test_detokenize_refuses_every_id_outside_the_vocab(http, base_url):
    status, body = await post(http, base_url + "/detokenize", {"tokens": [1, -1, 49152, "7", True, 5]})
    assert status == 400
    fields = [e["field"] for e in body["error"]["errors"]]
    assert fields == ["tokens[1]", "tokens[2]", "tokens[3]", "tokens[4]"]
    assert all("0..49151" in e["constraint"] for e in body["error"]["errors"])


async def test_detokenize_counts_what_it_does_not_list(http, base_url):
    status, body = await post(http, base_url + "/detokenize", {"tokens": [10**9] * 40})
    assert status == 400 and len(body["error"]["errors"]) == 17 and "24 more" in body["error"]["errors"][-1]["message"]


@pytest.mark.parametrize("route,body,fields", [
    ("/tokenize", {}, ["content"]),
    ("/tokenize", {"content": 5, "with_pieces": "yes", "add_special": 1}, ["content", "add_special", "with_pieces"]),
    ("/detokenize", {"tokens": "1 2 3"}, ["tokens"]),
    ("/apply-template", {"messages": []}, ["messages"]),
    # an image part without its image_url: the part is named (images are read since #36)
    ("/apply-template", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}], "top_p": 3},
     ["messages[0].content[0]", "top_p"]),
])
async def test_bad_bodies_list_every_problem(http, base_url, route, body, fields):
    status, answer = await post(http, base_url + route, body)
    assert status == 400 and sorted(e["field"] for e in answer["error"]["errors"]) == sorted(fields)


async def test_apply_template_is_the_prompt_chat_runs(http, base_url):
    status, applied = await post(http, base_url + "/apply-template", {"messages": CONVERSATION})
    assert status == 200
    prompt = applied["prompt"]
    assert prompt.startswith("<|im_start|>system\nYou answer") and prompt.endswith("<|im_start|>assistant\n")
    _, tokens = await post(http, base_url + "/tokenize", {"content": prompt, "add_special": True})
    body = {"temperature": 0, "max_tokens": 24}
    chat = await openai_once(http, base_url + "/v1/chat/completions", {**body, "messages": CONVERSATION})
    assert chat["usage"]["prompt_tokens"] == len(tokens["tokens"])
    # The same prompt sent as a completion is the same request: the same greedy text.
    completion = await openai_once(http, base_url + "/v1/completions", {**body, "prompt": prompt})
    assert completion_text(completion) == completion_text(chat)


async def test_apply_template_renders_tools_as_llama_server_does(http, base_url):
    """The model's own template shows no tools: the prompt with tools is the prompt without them, as llama-server
    renders it (chat refuses those tools: tests/e2e/test_tools.py), and a tool result in the history renders."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    history = [*CONVERSATION,
               {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "Tokyo"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "rainy, 14 C"}]
    status, applied = await post(http, base_url + "/apply-template", {"messages": history, "tools": tools})
    _, bare = await post(http, base_url + "/apply-template", {"messages": history})
    assert status == 200 and applied["prompt"] == bare["prompt"] and "rainy, 14 C" in bare["prompt"]
