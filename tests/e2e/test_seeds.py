"""Seeds use all 64 bits: the draw is seeded with the whole seed, not a 32-bit fold of it, and so are llama.cpp's own
stages that draw (Mirostat) from a 32-bit seed made of every bit of it."""

import pytest

from tests.helpers import openai_once

BODY = {"prompt": "Once upon a time", "temperature": 1.5, "max_tokens": 24}


async def _text(http, base_url, seed: int, **fields) -> str:
    body = await openai_once(http, base_url + "/v1/completions", {**BODY, **fields, "seed": seed})
    return body["choices"][0]["text"]


@pytest.mark.parametrize("drawn_by", [{}, {"mirostat": 2}], ids=["seeded-draw", "mirostat"])
@pytest.mark.parametrize("seed,other", [
    (5, 5 + 2**32),  # equal modulo 2^32
    (7, 7 + 0xFFFFFFFF),  # equal modulo 2^32 - 1, the fold a 32-bit seed would need
    (2**64 - 1, 2**63 - 1),
])
async def test_seeds_that_differ_above_32_bits_draw_differently(http, base_url, seed, other, drawn_by):
    first = await _text(http, base_url, seed, **drawn_by)
    assert first == await _text(http, base_url, seed, **drawn_by)  # repeatable
    assert first != await _text(http, base_url, other, **drawn_by)
