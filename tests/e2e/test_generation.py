"""Sampling and stopping on the real model: determinism, seeds, every finish reason, UTF-8."""

import asyncio

import llama_cpp
import pytest

from tests.helpers import completion_text, openai_once, openai_stream

STORY = {"prompt": "Once upon a time, in a land far away,", "max_tokens": 128}


async def complete(http, base_url, **body):
    return await openai_once(http, base_url + "/v1/completions", body)


async def test_greedy_is_deterministic_over_128_tokens(http, base_url):
    first = await complete(http, base_url, **STORY, temperature=0)
    second = await complete(http, base_url, **STORY, temperature=0)
    assert first["usage"]["completion_tokens"] == 128
    assert completion_text(first) == completion_text(second)


async def test_greedy_alone_equals_greedy_beside_three_others(http, base_url):
    prompts = ["The history of Rome", "def fibonacci(n):", "Recipe for pancakes:", "Dear diary, today"]
    alone = [completion_text(await complete(http, base_url, prompt=p, max_tokens=64, temperature=0)) for p in prompts]
    together = await asyncio.gather(*(complete(http, base_url, prompt=p, max_tokens=64, temperature=0)
                                      for p in prompts))
    assert [completion_text(t) for t in together] == alone


async def test_same_seed_same_text_other_seed_other_text(http, base_url):
    sampled = {**STORY, "temperature": 1.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "max_tokens": 48}
    a = completion_text(await complete(http, base_url, **sampled, seed=1234))
    b = completion_text(await complete(http, base_url, **sampled, seed=1234))
    c = completion_text(await complete(http, base_url, **sampled, seed=4321))
    assert a == b and a != c


async def test_seeded_sampling_alone_equals_seeded_sampling_beside_three_others(http, base_url):
    prompts = ["The history of Rome", "def fibonacci(n):", "Recipe for pancakes:", "Dear diary, today"]
    sampled = {"max_tokens": 48, "temperature": 0.9, "top_p": 0.95}
    alone = [completion_text(await complete(http, base_url, prompt=p, seed=10 + i, **sampled))
             for i, p in enumerate(prompts)]
    together = await asyncio.gather(*(complete(http, base_url, prompt=p, seed=10 + i, **sampled)
                                      for i, p in enumerate(prompts)))
    assert [completion_text(t) for t in together] == alone


def repeated_words(text: str, window: int = 40) -> int:
    """How many words already appeared among the `window` words before them."""
    words = text.split()
    return sum(word in words[max(0, i - window):i] for i, word in enumerate(words))


async def test_truncation_to_the_top_token_is_greedy_whatever_the_seed(http, base_url):
    short_story = {**STORY, "max_tokens": 48}
    greedy = completion_text(await complete(http, base_url, **short_story, temperature=0))
    sampled = {**short_story, "temperature": 1.0, "seed": 5}
    assert completion_text(await complete(http, base_url, **sampled)) != greedy  # temperature does sample
    for narrowest in ({"top_k": 1}, {"top_p": 0.0}, {"min_p": 1.0}):
        for seed in (5, 6):
            text = completion_text(await complete(http, base_url, **{**sampled, **narrowest, "seed": seed}))
            assert text == greedy, narrowest


async def test_penalties_remove_repeats_and_repeat_last_n_zero_turns_them_off(http, base_url):
    greedy = completion_text(await complete(http, base_url, **STORY, temperature=0))
    assert repeated_words(greedy) > 20  # this small model loops on its own: room for penalties to show
    for penalty in ({"repeat_penalty": 2.0}, {"presence_penalty": 2.0}, {"frequency_penalty": 2.0}):
        text = completion_text(await complete(http, base_url, **STORY, temperature=0, **penalty))
        # Fewer repeats than greedy (presence_penalty, the mildest, took 27 to 22 on the test model): a penalty
        # that did nothing would leave the greedy text as it is.
        assert repeated_words(text) < repeated_words(greedy) and text != greedy, (penalty, text)
    # repeat_last_n counts the tokens the penalties look back over: none means no penalty at all.
    off = await complete(http, base_url, **STORY, temperature=0, repeat_penalty=2.0, presence_penalty=2.0,
                         frequency_penalty=2.0, repeat_last_n=0)
    assert completion_text(off) == greedy


async def test_logit_bias_forces_a_token_and_bans_one(http, base_url, model_path):
    plain = await complete(http, base_url, prompt="The capital of France is", max_tokens=3, temperature=0)
    assert completion_text(plain).startswith(" Paris")
    # Token 30 is "." in SmolLM2's vocab: a +100 bias makes greedy pick it every time.
    forced = await complete(http, base_url, prompt="The capital of France is", max_tokens=3, temperature=0,
                            logit_bias={"30": 100})
    assert completion_text(forced) == "..."
    # -100 on greedy's first token (its id from llama.cpp's tokenizer, not the worker's) makes greedy pick another.
    vocab = llama_cpp.Llama(str(model_path), vocab_only=True, verbose=False)
    paris = vocab.tokenize(b" Paris", add_bos=False)
    assert len(paris) == 1
    banned = await complete(http, base_url, prompt="The capital of France is", max_tokens=3, temperature=0,
                            logit_bias={str(paris[0]): -100})
    assert not completion_text(banned).startswith(" Paris") and banned["usage"]["completion_tokens"] == 3


async def test_eos_ends_a_chat_before_max_tokens(http, base_url):
    body = await openai_once(http, base_url + "/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "Say hello."}], "temperature": 0,
                              "max_tokens": 200})
    assert body["choices"][0]["finish_reason"] == "stop" and body["usage"]["completion_tokens"] < 200
    assert "<|im_end|>" not in body["choices"][0]["message"]["content"]


async def test_max_tokens_is_exact(http, base_url):
    for n in (1, 7):
        body = await complete(http, base_url, **{**STORY, "max_tokens": n}, temperature=0)
        assert body["usage"]["completion_tokens"] == n and body["choices"][0]["finish_reason"] == "length"


async def test_stop_string_split_across_tokens(http, base_url):
    full = completion_text(await complete(http, base_url, **STORY, temperature=0))
    # A stop string that starts inside one token and ends inside a later one.
    start = len(full) // 2
    stop = full[start + 1:start + 9]
    streamed = await openai_stream(http, base_url + "/v1/completions", {**STORY, "temperature": 0, "stop": [stop]})
    assert streamed.text == full[:full.index(stop)] and streamed.finish_reason == "stop"
    assert stop not in streamed.text


async def test_multibyte_utf8_streams_byte_exact(http, base_url):
    body = {"prompt": "日本の首都は東京です。中国の首都は", "max_tokens": 48, "temperature": 0}
    whole = completion_text(await complete(http, base_url, **body))
    streamed = await openai_stream(http, base_url + "/v1/completions", body)
    assert streamed.text == whole and any(ord(ch) > 0x2E80 for ch in whole)
    # No piece splits a character; only max_tokens may cut the last one, whose bytes then end as U+FFFD.
    cut = streamed.finish_reason == "length" and whole.endswith("\ufffd")
    assert all("\ufffd" not in piece for piece in streamed.pieces[:-1])
    assert "\ufffd" not in streamed.pieces[-1].removesuffix("\ufffd" if cut else "")
    assert streamed.text.encode("utf-8") == whole.encode("utf-8")


async def test_emoji_answer_streams_whole(http, base_url):
    # SmolLM2 spells each emoji as two byte-level tokens, so every emoji here is split across tokens.
    body = {"prompt": "Emoji: 🙂😀🎉🚀🙂😀🎉", "max_tokens": 32, "temperature": 0}
    whole = completion_text(await complete(http, base_url, **body))
    streamed = await openai_stream(http, base_url + "/v1/completions", body)
    assert streamed.text == whole and any(ord(ch) > 0xFFFF for ch in whole)
    for piece in streamed.pieces:
        assert not ("\ud800" <= piece[-1] <= "\udfff")  # never half a character


@pytest.mark.parametrize("n_words", [0, 99, 999])
async def test_prompt_lengths_1_100_1000_tokens(http, base_url, n_words):
    # "Hello" is one token; " hello" is one token; so the prompt has 1 + n_words tokens.
    prompt = "Hello" + " hello" * n_words
    body = await complete(http, base_url, prompt=prompt, max_tokens=8, temperature=0)
    assert body["usage"]["prompt_tokens"] == 1 + n_words
    assert body["usage"]["completion_tokens"] == 8


async def test_prompt_over_the_context_is_refused_not_truncated(http, base_url):
    async with http.post(base_url + "/v1/completions", json={"prompt": "hello " * 2100, "max_tokens": 8}) as response:
        assert response.status == 400
        error = (await response.json())["error"]
    assert error["code"] == "context_length_exceeded" and "2048" in error["message"]
    long_prompt = {"prompt": "hello " * 1000, "max_tokens": 1500}
    async with http.post(base_url + "/v1/completions", json=long_prompt) as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "context_length_exceeded"


async def test_no_max_tokens_runs_to_the_context_end_at_most(http, base_url):
    body = await complete(http, base_url, prompt="Hello", temperature=0)
    assert body["usage"]["total_tokens"] <= 2048
