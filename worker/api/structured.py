"""Structured output fields (docs/api.md, "Structured output") -> the one GBNF grammar a request samples under, with
every problem listed. The served model checks the grammar against its vocabulary as it prepares the request
(engine/serving/input_processor.py), naming the field that gave it (grammar_field).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from worker.api.problems import Reader
from worker.schema_grammar import SchemaProblem, object_grammar, schema_grammar

MAX_GRAMMAR_CHARS = 256 * 1024
RESPONSE_FORMATS = ("text", "json_object", "json_schema")
_PARSES = "GBNF that llama.cpp parses (root rule: root)"
_SUPPORTED = "a JSON schema the grammar converter supports (see the README)"


def _grammar(r: Reader, field: str) -> str | None:
    """A GBNF text field; "" or null means none, as in llama-server."""
    if r.body.get(field) is None:
        return None
    text = r.string(field, max_length=MAX_GRAMMAR_CHARS)
    if not text:
        return None
    if "\0" in text:  # llama.cpp reads the text as a C string: it would end there
        r.problem(field, _PARSES, f"{field} contains a NUL character")
        return None
    return text


def checked_schema(r: Reader, field: str, schema: Any) -> str | None:
    """A JSON schema field as GBNF by the converter (worker/schema_grammar.py), every problem
    with it noted in `r` (None then)."""
    try:
        text = schema_grammar(schema)
    except SchemaProblem as refused:
        for where, message in refused.problems:
            r.problem(f"{field}.{where}" if where else field, _SUPPORTED, f"{field}: {message}")
        return None
    return text


def _one_of(r: Reader, fields: tuple[str, str], grammars: tuple[str | None, str | None]) -> str | None:
    if all(g is not None for g in grammars):
        r.problem(fields[1], f"{fields[0]} or {fields[1]}, not both",
                  f"send one constraint: {fields[0]} or {fields[1]}")
        return None
    return grammars[0] if grammars[0] is not None else grammars[1]


def openai_grammar(r: Reader) -> str | None:
    """`response_format` (text, json_object, json_schema) and llama-server's `grammar` -> the request's grammar
    (None: unconstrained); at most one of them constrains."""
    grammar = _grammar(r, "grammar")
    spec = r.body.get("response_format")
    if spec is None:
        return grammar
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind not in RESPONSE_FORMATS:
        field = "response_format.type" if isinstance(spec, dict) else "response_format"
        r.problem(field, f"one of {', '.join(RESPONSE_FORMATS)}",
                  f"response_format must be {{\"type\": one of {', '.join(RESPONSE_FORMATS)}}}", kind)
        return None
    if kind == "text":
        return grammar
    if kind == "json_object":
        return _one_of(r, ("grammar", "response_format"), (grammar, object_grammar()))
    json_schema = spec.get("json_schema")
    if not isinstance(json_schema, dict) or not isinstance(json_schema.get("schema"), dict):
        r.problem("response_format.json_schema", "{name, schema, strict}",
                  "response_format json_schema needs json_schema: {\"name\", \"schema\": {...}, \"strict\"}")
        return None
    nested = Reader(json_schema)
    nested.string("name")
    nested.boolean("strict")
    r.problems += [replace(p, field=f"response_format.json_schema.{p.field}") for p in nested.problems]
    converted = checked_schema(r, "response_format.json_schema.schema", json_schema["schema"])
    return _one_of(r, ("grammar", "response_format"), (grammar, converted))


def execute_grammar(r: Reader) -> str | None:
    """/execute's `grammar` and `json_schema` -> the job's grammar (None: unconstrained)."""
    grammar = _grammar(r, "grammar")
    schema = r.body.get("json_schema")
    converted = checked_schema(r, "json_schema", schema) if schema is not None else None
    return _one_of(r, ("grammar", "json_schema"), (grammar, converted))
