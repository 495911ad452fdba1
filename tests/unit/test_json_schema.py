"""The JSON schema checks alone, without a worker (worker/schema_grammar.py): a refusal names the
keyword, annotations are ignored, patterns are taken only where they cannot break the JSON string."""

from __future__ import annotations

import pytest

from worker.schema_grammar import MAX_REPEAT, TYPES, SchemaProblem, pattern_problem, schema_grammar


@pytest.mark.parametrize("schema,where", [
    ({"type": ["string", "null"], "maxLength": 3}, "maxLength"),
    ({"anyOf": [{"type": "string"}], "type": "string"}, "type"),
    ({"$ref": "#/$defs/missing"}, "$ref"),
    ({"$ref": "https://example.com/schema.json"}, "$ref"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "required"),
    ({"type": "array", "prefixItems": [{"type": "string"}], "minItems": 2}, "prefixItems"),
    ({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "string"}}, "items"),
    ({"type": "array", "items": {"type": "string"}, "maxItems": MAX_REPEAT + 1}, "maxItems"),
    ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, "allOf"),
    ({"type": "string", "format": "date", "minLength": 3}, "minLength"),
    ({"if": {"type": "string"}, "then": {"maxLength": 2}}, "if"),
])
def test_schema_refusals_name_the_keyword(schema, where):
    with pytest.raises(SchemaProblem) as refused:
        schema_grammar(schema)
    assert where in [path for path, _ in refused.value.problems]


def test_annotations_and_unknown_keywords_are_ignored():
    """Ignored as docs/api.md says: the grammar is the one of the schema without them, and a subschema left with no
    constraint allows any JSON value."""
    annotated = {"title": "T", "description": "d", "$comment": "c", "x-vendor": 1, "type": "object",
                 "properties": {"a": {"description": "anything", "examples": [1], "default": 0}},
                 "additionalProperties": True}
    bare = {"type": "object", "properties": {"a": {}}, "additionalProperties": True}
    assert schema_grammar(annotated) == schema_grammar(bare)
    any_value = {"type": "object", "properties": {"a": {"type": list(TYPES)}}, "additionalProperties": True}
    assert schema_grammar(bare) == schema_grammar(any_value)


@pytest.mark.parametrize("pattern,ok", [
    ("^[A-Z]{2}[0-9]{3,4}$", True),
    ("^(ab|cd)+x?$", True),
    ("^\\(x\\)$", True),
    ("^[a-z]+", False),  # unanchored: JSON Schema patterns search, the converter matches whole strings
    ("^a.b$", False),  # a wildcard can match a quote or a backslash, written raw into the JSON string
    ("^[^a]$", False),
    ("^[ -~]$", False),  # the range holds a quote and a backslash
    ("^\\d{3}$", False),
    ("^a\"b$", False),
    ("^(?=a)a$", False),
    ("^a{1,5000}$", False),
])
def test_pattern_checks(pattern, ok):
    assert (pattern_problem(pattern) is None) == ok


def test_additional_properties_true_beside_properties_take_any_value():
    """true allows any value, as JSON Schema says: llama.cpp's converter reads it as {}, and {} as an object only."""
    grammar = schema_grammar({"type": "object", "properties": {"a": {"type": "integer"}},
                              "additionalProperties": True})
    rule = next(line for line in grammar.splitlines() if line.startswith("additional-value ::="))
    assert {"string", "number", "boolean", "null", "array"} <= set(rule.split("::=")[1].replace("|", " ").split())
