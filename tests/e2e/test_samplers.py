"""llama.cpp's other samplers on the real model, under llama-server's field names: a seeded request's text is the same
every time, alone and beside other requests (each sequence has a chain of its own, and the stages that roll dice,
XTC and Mirostat, are seeded from the request's seed). Each stage's effect on a known distribution is
tests/model/test_sampler_stages.py's."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from tests.helpers import completion_text, openai_once

# The whole distribution at temperature 1, so that the seed decides much and every stage has tokens to act on.
DRAWN = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 24}
STAGES = {
    "dry": {"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 256},
    "xtc": {"xtc_probability": 0.5, "xtc_threshold": 0.1},
    "top_n_sigma": {"top_n_sigma": 1.0},
    "mirostat": {"mirostat": 1, "mirostat_tau": 4.0, "mirostat_eta": 0.1},
    "mirostat_2": {"mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.1},
    "dynatemp": {"dynatemp_range": 0.5, "dynatemp_exponent": 1.5},
    "order": {"samplers": "pkt", "top_k": 20, "top_p": 0.9},
    "typical": {"typical_p": 0.8, "min_keep": 2},
}
PROMPTS = ["The old lighthouse keeper", "In the kitchen, the recipe", "My favourite programming language",
           "A list of colors:"]


async def _text(http, base_url: str, prompt: str, stage: dict, seed: int) -> str:
    body = {**DRAWN, **stage, "prompt": prompt, "seed": seed}
    return completion_text(await openai_once(http, base_url + "/v1/completions", body))


@pytest.mark.parametrize("name", list(STAGES))
async def test_a_seeded_stage_draws_the_same_text_alone_and_beside_others(http, base_url, name):
    stage = STAGES[name]
    alone = await _text(http, base_url, PROMPTS[0], stage, 42)
    assert await _text(http, base_url, PROMPTS[0], stage, 42) == alone
    others = [STAGES[other] for other in STAGES if other != name][:3]
    together = await asyncio.gather(_text(http, base_url, PROMPTS[0], stage, 42),
                                    *(_text(http, base_url, prompt, other, 7 + i)
                                      for i, (prompt, other) in enumerate(zip(PROMPTS[1:], others))))
    assert together[0] == alone
    assert await _text(http, base_url, PROMPTS[0], stage, 43) != alone  # the seed draws it


async def test_xtc_under_a_grammar_draws_only_what_the_grammar_allows(http, base_url):
    """XTC moves the candidates' start past the tokens it drops: the grammar's draw reads its token from there."""
    schema = {"type": "object", "required": ["city", "rank"], "additionalProperties": False,
              "properties": {"city": {"type": "string", "maxLength": 12}, "rank": {"type": "integer"}}}
    for seed in range(3):
        body = {"messages": [{"role": "user", "content": "A city and its rank, as JSON."}], **DRAWN,
                "xtc_probability": 1.0, "xtc_threshold": 0.05, "max_tokens": 40, "seed": seed,
                "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}}
        result = await openai_once(http, base_url + "/v1/chat/completions", body)
        assert result["choices"][0]["finish_reason"] == "stop", result
        jsonschema.validate(json.loads(completion_text(result)), schema)


async def test_ignore_eos_runs_the_answer_to_max_tokens(http, base_url):
    """llama-server's ignore_eos: a greedy chat answer that ends by itself well before max_tokens runs to it instead,
    its first tokens those of the answer that ended (an end-of-generation token is the only one banned)."""
    body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 48, "temperature": 0}
    ended = await openai_once(http, base_url + "/v1/chat/completions", body)
    assert ended["choices"][0]["finish_reason"] == "stop" and ended["usage"]["completion_tokens"] < 48, ended
    ran = await openai_once(http, base_url + "/v1/chat/completions", {**body, "ignore_eos": True})
    assert ran["choices"][0]["finish_reason"] == "length" and ran["usage"]["completion_tokens"] == 48, ran
    assert ran["choices"][0]["message"]["content"].startswith(ended["choices"][0]["message"]["content"]), ran
    async with http.post(base_url + "/v1/completions", json={"prompt": "Hi", "ignore_eos": "yes"}) as response:
        assert response.status == 400 and "ignore_eos" in await response.text()
