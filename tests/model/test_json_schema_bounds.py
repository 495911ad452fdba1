"""Integer bounds in JSON schemas: the grammar holds exactly the integers in range, as llama.cpp itself reads it.

Texts are fed one character at a time to llama.cpp's grammar sampler, built on the test model's vocabulary
(every character used here is one token of it): a character the grammar masks ends the text's chances, and
a text is whole when an end-of-generation token is allowed after it. No model weights, no sampling.
"""

from __future__ import annotations

import ctypes
import math
import random

import llama_cpp
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from llama_cpp.llama_grammar import SchemaConverter

from worker.schema_grammar import MAX_INT_DIGITS, SchemaProblem, integer_range, schema_grammar

DIGITS = "0123456789-"


class Matcher:
    """One grammar in llama.cpp's grammar sampler, asked about texts."""

    def __init__(self, vocab: llama_cpp.llama_vocab_p, grammar: str) -> None:
        self.vocab = vocab
        self.sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        assert self.sampler, grammar
        self.end = llama_cpp.llama_vocab_eos(vocab)
        self._data = (llama_cpp.llama_token_data * 1)()
        self._one = llama_cpp.llama_token_data_array(self._data, 1, -1, False)
        self._tokens: dict[str, int] = {}

    def __enter__(self) -> Matcher:
        return self

    def __exit__(self, *_: object) -> None:
        llama_cpp.llama_sampler_free(self.sampler)

    def token(self, char: str) -> int:
        if char not in self._tokens:
            data = char.encode()
            buf = (llama_cpp.llama_token * 8)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), False, False)
            assert n == 1, f"{char!r} is {n} tokens"
            self._tokens[char] = buf[0]
        return self._tokens[char]

    def allows(self, token: int) -> bool:
        """Whether the grammar, in its state now, lets `token` come next (as the worker's GrammarSampler asks)."""
        self._data[0].id, self._data[0].logit, self._data[0].p = token, 1.0, 0.0
        self._one.size, self._one.selected, self._one.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(self._one))
        return self._data[0].logit != -math.inf

    def feed(self, text: str) -> bool:
        """From the start, accept `text` as far as the grammar lets it; whether it all went in."""
        llama_cpp.llama_sampler_reset(self.sampler)
        for char in text:
            if not self.allows(self.token(char)):
                return False
            llama_cpp.llama_sampler_accept(self.sampler, self.token(char))  # refused ones would abort
        return True

    def accepts(self, text: str) -> bool:
        return self.feed(text) and self.allows(self.end)

    def spelled(self, longest: int) -> set[str]:
        """Every text of digits and "-", up to `longest` characters, that the grammar holds whole."""
        found, prefixes = set(), [""]
        while prefixes:
            prefix = prefixes.pop()
            assert self.feed(prefix)
            if self.allows(self.end):
                found.add(prefix)
            if len(prefix) < longest:
                prefixes += [prefix + c for c in DIGITS if self.allows(self.token(c))]
        return found


def _integer(**bounds: float) -> dict:
    return {"type": "integer", **bounds}


# Small ranges, listed whole: every text up to two characters longer than the widest number is tried.
SMALL = [
    ({"minimum": 0, "maximum": 9}, range(0, 10)),
    ({"minimum": 1, "maximum": 100}, range(1, 101)),
    ({"minimum": -5, "maximum": 5}, range(-5, 6)),
    ({"minimum": -100, "maximum": -3}, range(-100, -2)),
    ({"minimum": 7, "maximum": 7}, range(7, 8)),
    ({"exclusiveMinimum": 0, "exclusiveMaximum": 10}, range(1, 10)),
    ({"exclusiveMinimum": -11, "maximum": -10}, range(-10, -9)),
    ({"minimum": 1.5, "exclusiveMaximum": 9.5}, range(2, 10)),  # fractional bounds round inwards
    ({"minimum": 3, "exclusiveMinimum": 5, "maximum": 50, "exclusiveMaximum": 40}, range(6, 40)),  # tighter wins
    ({"minimum": 19, "maximum": 2001}, range(19, 2002)),
    ({"minimum": -1005, "maximum": 105}, range(-1005, 106)),
]


@pytest.mark.parametrize("bounds,expected", SMALL, ids=[str(b) for b, _ in SMALL])
def test_small_ranges_hold_exactly_their_integers(vocab, bounds, expected):
    longest = max(len(str(n)) for n in expected) + 2
    with Matcher(vocab, schema_grammar(_integer(**bounds))) as grammar:
        assert grammar.spelled(longest) == {str(n) for n in expected}


# Wide and open ranges, probed: every integer near the bounds, near zero and near each power of ten.
WIDE = [
    {"minimum": 0, "maximum": 1000000},
    {"minimum": 0},
    {"minimum": 105},  # llama.cpp's open-ended branch admits 15 and 100..104 here
    {"minimum": 1005},
    {"minimum": -105},
    {"exclusiveMinimum": 17},
    {"maximum": 0},
    {"maximum": 105},
    {"maximum": -105},
    {"exclusiveMaximum": -1},
    {"minimum": -9223372036854775808, "maximum": 9223372036854775807},
    {"minimum": 10 ** 15, "maximum": 10 ** 17 + 5},
]


def _probes(low: int, high: int) -> set[int]:
    near = {n + d for n in (low, high, 0) for d in range(-150, 151)}
    powers = {s * 10 ** k + d for s in (1, -1) for k in range(MAX_INT_DIGITS + 2) for d in (-1, 0, 1)}
    spread = random.Random(7)
    return near | powers | {spread.randint(-10 ** MAX_INT_DIGITS, 10 ** MAX_INT_DIGITS) for _ in range(300)}


@pytest.mark.parametrize("bounds", WIDE, ids=str)
def test_wide_and_open_ranges_hold_exactly_their_integers(vocab, bounds):
    low, high = integer_range(bounds)
    with Matcher(vocab, schema_grammar(_integer(**bounds))) as grammar:
        wrong = sorted(n for n in _probes(low, high)
                       if abs(n) < 10 ** MAX_INT_DIGITS and grammar.accepts(str(n)) != (low <= n <= high))
        assert not wrong
        for text in ("-0", "00", "01", "-01", "+5", "5.0", "1e2", "", "-"):
            assert not grammar.accepts(text), text  # not JSON, or not an integer's usual spelling


BOUND = st.one_of(st.none(), st.integers(-10 ** 6, 10 ** 6), st.floats(-1e6, 1e6))


@given(ends=st.tuples(BOUND, BOUND), exclusive=st.tuples(st.booleans(), st.booleans()),
       probes=st.lists(st.integers(-2 * 10 ** 6, 2 * 10 ** 6), max_size=40))
@settings(max_examples=150, deadline=None)
def test_any_bounds_hold_exactly_their_integers(vocab, ends, exclusive, probes):
    low, high = sorted(ends) if None not in ends else ends
    bounds = {key: value for key, value in (("exclusiveMinimum" if exclusive[0] else "minimum", low),
                                            ("exclusiveMaximum" if exclusive[1] else "maximum", high))
              if value is not None}
    least, most = integer_range(bounds)
    assume(bounds and least <= most)  # no bounds: the plain integer rule; none left: refused (tested below)
    with Matcher(vocab, schema_grammar(_integer(**bounds))) as grammar:
        for n in {*probes, least - 1, least, least + 1, most - 1, most, most + 1}:
            assert grammar.accepts(str(n)) == (least <= n <= most), (bounds, n)


def test_an_open_side_ends_at_the_digit_limit(vocab):
    with Matcher(vocab, schema_grammar(_integer(minimum=0))) as grammar:
        assert grammar.accepts("9" * MAX_INT_DIGITS) and not grammar.accepts("1" + "0" * MAX_INT_DIGITS)


def test_the_matcher_can_fail(vocab):
    """The converter alone drops the bounds: the same check sees 10 and -1 go through."""
    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(_integer(minimum=0, maximum=9), "")
    with Matcher(vocab, converter.format_grammar()) as grammar:
        assert grammar.accepts("10") and grammar.accepts("-1")


def test_bounds_hold_inside_objects_arrays_and_references(vocab):
    schema = {"type": "object", "properties": {
        "integer": {"type": "integer", "minimum": 1, "maximum": 3},  # a property named as a primitive rule
        "n": {"type": "integer"},
        "dice": {"type": "array", "items": {"$ref": "#/$defs/die"}, "maxItems": 2},
    }, "required": ["integer", "n", "dice"], "additionalProperties": False,
        "$defs": {"die": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 7}}}
    with Matcher(vocab, schema_grammar(schema)) as grammar:
        assert grammar.accepts('{"integer": 2, "n": -40, "dice": [1, 6]}')
        assert not grammar.accepts('{"integer": 4, "n": -40, "dice": [1, 6]}')
        assert not grammar.accepts('{"integer": 2, "n": -40, "dice": [0]}')
        assert not grammar.accepts('{"integer": 2, "n": -40, "dice": [7]}')


@pytest.mark.parametrize("schema,where,words", [
    ({"type": "number", "minimum": 0}, "minimum", "only on type integer"),
    ({"type": "number", "exclusiveMaximum": 1.5}, "exclusiveMaximum", "only on type integer"),
    ({"minimum": 0}, "minimum", "only on type integer"),
    ({"type": "integer", "multipleOf": 5}, "multipleOf", "multipleOf is not supported"),
    ({"type": ["integer", "null"], "minimum": 0}, "minimum", "beside a list of types"),
    ({"type": "integer", "enum": [1, 2], "maximum": 1}, "maximum", "beside enum"),
    ({"type": "integer", "minimum": "1"}, "minimum", "must be a number"),
    ({"type": "integer", "exclusiveMinimum": True}, "exclusiveMinimum", "must be a number"),  # draft 4's form
    ({"type": "integer", "maximum": 10 ** MAX_INT_DIGITS}, "maximum", "must be a number"),
    ({"type": "integer", "maximum": math.inf}, "maximum", "must be a number"),
    ({"type": "integer", "minimum": math.nan}, "minimum", "must be a number"),
])
def test_unsupported_bounds_are_refused(schema, where, words):
    with pytest.raises(SchemaProblem) as refused:
        schema_grammar(schema)
    assert any(path == where and words in message for path, message in refused.value.problems), refused.value


@pytest.mark.parametrize("bounds", [
    {"minimum": 5, "maximum": 4},
    {"minimum": 5, "exclusiveMaximum": 5},
    {"exclusiveMinimum": 4, "exclusiveMaximum": 5},
    {"minimum": 4.2, "maximum": 4.8},
    {"exclusiveMinimum": 10 ** MAX_INT_DIGITS - 1},
])
def test_empty_ranges_are_refused(bounds):
    with pytest.raises(SchemaProblem) as refused:
        schema_grammar(_integer(**bounds))
    assert [path for path, _ in refused.value.problems] == [next(iter(bounds))]
