"""JSON Schema -> GBNF by llama-cpp-python's converter, refusing what it would not honor: a schema is honored in full
or refused with every validation keyword it would drop listed; annotations and unknown keywords are ignored, as
JSON Schema validators ignore them."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from worker.lazy import standalone_module

if TYPE_CHECKING:  # the same classes, named so that a type checker can use them as types
    from llama_cpp.llama_grammar import RESERVED_NAMES, BuiltinRule, SchemaConverter
else:
    # Loaded from its file: the HTTP routes import this module at startup, before the worker chooses its llama.cpp
    # build.
    _grammar = standalone_module("llama_cpp", "llama_grammar")
    RESERVED_NAMES, BuiltinRule, SchemaConverter = (_grammar.RESERVED_NAMES, _grammar.BuiltinRule,
                                                    _grammar.SchemaConverter)

TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
FORMATS = ("date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5")
# The converter writes bounds out as nested optional rules, so the grammar grows with them.
MAX_REPEAT = 1000
MAX_DEPTH = 64
# Bounded integers have at most this many digits: an open side stops there (int64 and uint64 fit), and so
# must the bounds, which keeps their grammar small.
MAX_INT_DIGITS = 20
INTEGER_BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")

# Keywords that constrain instances (JSON Schema 2020-12 and the drafts before it); the others annotate.
VALIDATION = frozenset({
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "maxItems", "minItems", "uniqueItems", "maxContains",
    "minContains", "contains", "items", "prefixItems", "additionalItems", "unevaluatedItems", "maxProperties",
    "minProperties", "required", "dependentRequired", "dependentSchemas", "dependencies", "properties",
    "patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames", "allOf", "anyOf",
    "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef",
})
_DEFINITIONS = ("$defs", "definitions")

# JSON strings may not hold raw control characters (upstream's rule; this version allowed them).
_CHAR = BuiltinRule(r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])')
_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}


# Two slips of this converter version fixed as upstream llama.cpp fixed them (strings may not hold raw control
# characters, literals escape backslashes), and integer bounds, which it drops, written out exactly (integer_rule).
class _Converter(SchemaConverter):
    def _format_literal(self, literal: str) -> str:
        # The literal is JSON text: its backslash escapes must reach the output as written.
        return '"' + re.sub(r'[\r\n"\\]', lambda m: _LITERAL_ESCAPES[m.group(0)], literal) + '"'

    def _add_primitive(self, name: str, rule: BuiltinRule) -> str:
        return super()._add_primitive(name, _CHAR if name == "char" else rule)

    def visit(self, schema: dict[str, Any], name: str) -> str:
        # This converter version drops an integer's bounds; the walk keeps them on type integer alone.
        if schema.get("type") != "integer" or not set(INTEGER_BOUNDS) & set(schema):
            return super().visit(schema, name)
        rule_name = name + "-" if name in RESERVED_NAMES else name or "root"  # named as the converter names it
        return self._add_rule(rule_name, f"({integer_rule(*integer_range(schema))}) space")


@dataclass
class SchemaProblem(Exception):
    problems: list[tuple[str, str]]  # (path inside the schema, message)


def schema_grammar(schema: Any) -> str:
    """The GBNF grammar (root rule "root") of a JSON schema; raises SchemaProblem listing what is refused.
    The converter dispatches each subschema on one keyword and drops the rest (`$ref`, then `anyOf`/`oneOf`, a list
    of types, `const`, `enum`, object keywords, array keywords, `pattern`, `format`, string lengths, plain types):
    the walk goes in that same order first and lists every validation keyword the chosen branch would drop."""
    walk = _Walk()
    cleaned = walk.node(schema, (), 0)
    walk.check_refs()
    if walk.problems:
        raise SchemaProblem(walk.problems)
    converter = _Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        converter.visit(converter.resolve_refs(cleaned, ""), "")
    except Exception as exc:
        raise SchemaProblem([("", f"the grammar converter failed on this schema: {exc!r}")]) from None
    return converter.format_grammar()


def object_grammar() -> str:
    """Any one JSON object: response_format json_object."""
    return schema_grammar({"type": "object"})


Where = tuple[str | int, ...]  # keys and indexes from the schema's root


def _dotted(where: Where) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where).removeprefix(".")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPEAT


def _bound(value: Any) -> bool:
    # abs() keeps huge ints exact, and NaN and infinities fail the comparison.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 10 ** MAX_INT_DIGITS


def integer_range(schema: dict[str, Any]) -> tuple[int, int]:
    """The least and greatest integer that a schema's (valid) bounds allow; an open side ends at MAX_INT_DIGITS
    digits. Fractional bounds round inwards, and with both an inclusive and an exclusive bound the tighter wins."""
    edge = 10 ** MAX_INT_DIGITS - 1
    lows, highs = [-edge], [edge]
    if "minimum" in schema:
        lows.append(math.ceil(schema["minimum"]))
    if "exclusiveMinimum" in schema:
        lows.append(math.floor(schema["exclusiveMinimum"]) + 1)
    if "maximum" in schema:
        highs.append(math.floor(schema["maximum"]))
    if "exclusiveMaximum" in schema:
        highs.append(math.ceil(schema["exclusiveMaximum"]) - 1)
    return max(lows), min(highs)


# Integer ranges as grammar, ported from llama.cpp's build_min_max_int (common/json-schema-to-grammar.cpp;
# _generate_min_max_int in its examples/json_schema_to_grammar.py; ggml-org/llama.cpp#7797): split at the
# sign, then by digit count, so that within one count string order is number order, then by leading
# digit. Only its closed-range path is ported: its open-ended branches lose a bound's inner zeros (minimum
# 105 there admits 15 and 100..104 as well), so here an open side is closed at MAX_INT_DIGITS digits.

def integer_rule(low: int, high: int) -> str:
    """GBNF for exactly the JSON integers from low to high (low <= high): no leading zeros, no "-0"."""
    if high < 0:
        return f'"-" ({_naturals(-high, -low)})'
    if low < 0:
        return f'"-" ({_naturals(1, -low)}) | {_naturals(0, high)}'
    return _naturals(low, high)


def _naturals(low: int, high: int) -> str:
    """0 <= low <= high, one alternative per digit count, and one for all the counts the range covers whole
    from 2 digits up (an open side's 18 or so alternatives nearly doubled the cost of masking the vocabulary)."""
    counts = range(len(str(low)), len(str(high)) + 1)
    whole = [n for n in counts if n > 1 and low <= 10 ** (n - 1) and 10 ** n - 1 <= high]
    bands = [_same_length(str(max(low, 10 ** (n - 1) if n > 1 else 0)), str(min(high, 10 ** n - 1)))
             for n in counts if n not in whole]
    if whole:  # consecutive: the counts between low's and high's
        fewest, most = whole[0] - 1, whole[-1] - 1
        bands.append(f"[1-9] [0-9]{{{fewest}{'' if fewest == most else f',{most}'}}}")
    return " | ".join(bands)


def _same_length(low: str, high: str) -> str:
    """The digit strings from low to high, both of one length (leading zeros allowed: this may be a tail)."""
    shared = len(os.path.commonprefix([low, high]))
    if shared == len(low):
        return f'"{low}"'
    if shared:
        return f'"{low[:shared]}" ({_same_length(low[shared:], high[shared:])})'
    rest = len(low) - 1
    first, last = int(low[0]), int(high[0])
    head = tail = ""
    if low[1:] != "0" * rest:  # low's leading digit takes only the tails from low's up
        head = f"[{first}] ({_same_length(low[1:], '9' * rest)})"
        first += 1
    if high[1:] != "9" * rest:  # high's leading digit takes only the tails up to high's
        tail = f"[{last}] ({_same_length('0' * rest, high[1:])})"
        last -= 1
    middle = (f"[{first}-{last}]" + (f" [0-9]{{{rest}}}" if rest else "")) if first <= last else ""
    return " | ".join(part for part in (head, middle, tail) if part)


@dataclass
class _Walk:
    """One pass over a schema: the problems, and a copy holding only what the converter will honor."""

    problems: list[tuple[str, str]] = field(default_factory=list)  # (dotted path, message)
    refs: list[tuple[Where, str]] = field(default_factory=list)  # where a "#/..." reference sits, and it
    pointers: set[str] = field(default_factory=set)  # "#/..." of every subschema walked

    def problem(self, where: Where, message: str) -> None:
        self.problems.append((_dotted(where), message))

    def node(self, schema: Any, where: Where, depth: int) -> Any:
        if not isinstance(schema, dict):
            self.problem(where, "a schema must be an object")
            return {}
        if depth > MAX_DEPTH:
            self.problem(where, f"schemas nest deeper than {MAX_DEPTH} levels")
            return {}
        self.pointers.add("#/" + "/".join(map(str, where)))
        definitions = {container: {name: self.node(sub, (*where, container, name), depth + 1)
                                   for name, sub in schema[container].items()}
                       for container in _DEFINITIONS if isinstance(schema.get(container), dict)}
        return {**self._content(schema, where, depth), **definitions}

    def _content(self, schema: dict[str, Any], where: Where, depth: int) -> dict[str, Any]:
        all_of = schema.get("allOf")
        if all_of is not None and not VALIDATION & (set(schema) - {"allOf"}):
            if isinstance(all_of, list) and len(all_of) == 1:  # how some generators attach a description
                return self.node(all_of[0], (*where, "allOf", 0), depth + 1)
            self.problem((*where, "allOf"), "allOf is supported only with a single schema")
            return {}
        honored = _branch(schema)
        for keyword in sorted(VALIDATION & (set(schema) - honored)):
            if not (keyword == "additionalProperties" and schema[keyword] is True):  # true allows what it may
                self.problem((*where, keyword), _why_not(keyword, schema))
        cleaned = {k: v for k, v in schema.items() if k in honored}
        if not cleaned:  # no constraint: any JSON value (the converter would read {} as any object, or fail)
            cleaned["type"] = list(TYPES)
        self._children(cleaned, where, depth)
        return cleaned

    def _children(self, schema: dict[str, Any], where: Where, depth: int) -> None:
        """Check the honored keywords' values, walking (and cleaning) the subschemas among them."""
        for keyword, value in list(schema.items()):
            here = (*where, keyword)
            if keyword == "$ref":
                if isinstance(value, str) and value.startswith("#/"):
                    self.refs.append((here, value))
                else:
                    self.problem(here, "only local references (#/...) are supported")
            elif keyword in ("anyOf", "oneOf", "prefixItems") or (keyword == "items" and isinstance(value, list)):
                if not isinstance(value, list) or not value:
                    self.problem(here, f"{keyword} must be a non-empty list of schemas")
                else:
                    schema[keyword] = [self.node(sub, (*here, i), depth + 1) for i, sub in enumerate(value)]
            elif keyword in ("items", "additionalProperties"):
                if isinstance(value, dict):
                    schema[keyword] = self.node(value, here, depth + 1)
                elif keyword == "additionalProperties" and value is True:
                    # any JSON value: the converter reads true as {}, and {} as any object
                    schema[keyword] = {"type": list(TYPES)}
                elif value is not False:
                    self.problem(here, f"{keyword} must be a schema" + (" or a boolean" if keyword != "items" else ""))
            elif keyword == "properties":
                if not isinstance(value, dict):
                    self.problem(here, "properties must be an object of schemas")
                else:
                    schema[keyword] = {name: self.node(sub, (*here, name), depth + 1) for name, sub in value.items()}
            elif keyword == "required":
                names = schema.get("properties", {})
                if not isinstance(value, list) or not all(isinstance(n, str) and n in names for n in value):
                    self.problem(here, "required must list names from properties (only those are generated)")
            elif keyword == "type":
                kinds = value if isinstance(value, list) else [value]
                if not kinds or not all(isinstance(k, str) and k in TYPES for k in kinds):
                    self.problem(here, f"type must be one of {', '.join(TYPES)}, or a non-empty list of them")
            elif keyword == "enum" and (not isinstance(value, list) or not value):
                self.problem(here, "enum must be a non-empty list")
            elif keyword in ("minItems", "maxItems", "minLength", "maxLength") and not _count(value):
                self.problem(here, f"{keyword} must be an integer from 0 to {MAX_REPEAT}")
            elif keyword in INTEGER_BOUNDS and not _bound(value):
                self.problem(here, f"{keyword} must be a number less than 10^{MAX_INT_DIGITS} in magnitude")
            elif keyword == "pattern":
                why = pattern_problem(value) if isinstance(value, str) else "pattern must be a string"
                if why:
                    self.problem(here, why)
        for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
            if _count(schema.get(low)) and _count(schema.get(high)) and schema[low] > schema[high]:
                self.problem((*where, low), f"{low} is above {high}")
        bounds = [k for k in INTEGER_BOUNDS if k in schema]
        if bounds and all(_bound(schema[k]) for k in bounds):
            least, most = integer_range(schema)
            if least > most:
                self.problem((*where, bounds[0]), f"no integer lies within the bounds ({', '.join(bounds)})")
        tuple_items = schema.get("prefixItems", schema.get("items"))
        if isinstance(tuple_items, list):
            low, high = schema.get("minItems", 0), schema.get("maxItems", len(tuple_items))
            if _count(low) and _count(high) and not low <= len(tuple_items) <= high:
                self.problem((*where, "prefixItems" if "prefixItems" in schema else "items"),
                             f"a tuple of {len(tuple_items)} schemas is generated with exactly that many items, "
                             "outside minItems..maxItems")

    def check_refs(self) -> None:
        for where, pointer in self.refs:
            if pointer not in self.pointers:
                self.problem(where, f"{pointer} does not point at a subschema of this schema")


def _branch(schema: dict[str, Any]) -> set[str]:
    """The keywords the converter reads for this subschema, in its own dispatch order."""
    kind = schema.get("type")
    if "$ref" in schema:
        return {"$ref"}
    if "oneOf" in schema or "anyOf" in schema:
        return {"oneOf"} if "oneOf" in schema else {"anyOf"}
    if isinstance(kind, list):
        return {"type"}
    if "const" in schema:
        return {"const", "type"}
    if "enum" in schema:
        return {"enum", "type"}
    if kind in (None, "object") and ("properties" in schema or schema.get("additionalProperties", True) is not True):
        return {"type", "properties", "required", "additionalProperties"}
    if kind in (None, "array") and "prefixItems" in schema:  # a tuple; a truthy items would replace it
        tuple_keywords = {"type", "prefixItems", "minItems", "maxItems"}
        return tuple_keywords | ({"items"} if not schema.get("items", False) else set())
    if kind in (None, "array") and "items" in schema:
        return {"type", "items", "minItems", "maxItems"}
    if kind in (None, "string") and "pattern" in schema:
        return {"type", "pattern"}
    if kind in (None, "string") and schema.get("format") in FORMATS:
        return {"type", "format"}
    if kind == "string":
        return {"type", "minLength", "maxLength"}
    if kind == "integer":
        return {"type", *INTEGER_BOUNDS}
    return {"type"}


def _why_not(keyword: str, schema: dict[str, Any]) -> str:
    lead = next((k for k in ("$ref", "oneOf", "anyOf", "const", "enum") if k in schema), None)
    if lead is not None:
        return f"{keyword} is not supported beside {lead}"
    if isinstance(schema.get("type"), list):
        return f"{keyword} is not supported beside a list of types (write anyOf with one schema per type)"
    if keyword in INTEGER_BOUNDS:
        return f"{keyword} is supported only on type integer (a number's bounds are not enforced: use enum)"
    if keyword == "multipleOf":
        return "multipleOf is not supported: the grammar converter cannot express it (use enum)"
    if keyword == "format":
        return f"format {schema['format']!r} is not supported (supported: {', '.join(FORMATS)})"
    if keyword in ("minLength", "maxLength"):
        return f"{keyword} is supported only on type string without pattern or format"
    if keyword in ("minItems", "maxItems"):
        return f"{keyword} is supported only with items or prefixItems"
    if keyword == "items" and "prefixItems" in schema:
        return "items beside prefixItems is supported only as false"
    return f"{keyword} is not supported by the grammar converter"


# Outside classes, regex escapes that the converter turns back into plain characters.
_META = set("[]()|{}*+?")
_QUANTIFIER = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def pattern_problem(pattern: str) -> str | None:
    """Why the converter cannot turn `pattern` into a grammar whose strings stay valid JSON, or None.

    The converter writes a pattern's characters into the JSON string as they are, unescaped, so nothing
    may match a quote, a backslash or a control character; and it reads only a subset of regex syntax.
    """
    if not (pattern.startswith("^") and pattern.endswith("$")) or len(pattern) < 2:
        return "pattern must be anchored: start with ^ and end with $"
    body, i = pattern[1:-1], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            if body[i + 1:i + 2] not in _META or i + 1 >= len(body):
                return f"pattern escape {body[i:i + 2]!r} is not supported (write a class such as [0-9])"
            i += 2
            continue
        if c == "[":
            end, why = _class_end(body, i)
            if why:
                return why
            i = end
        elif c == "{":
            found = _QUANTIFIER.match(body, i)
            if not found or any(n and int(n) > MAX_REPEAT for n in found.groups()):
                return f"pattern quantifiers must be {{m}}, {{m,}} or {{m,n}} with counts up to {MAX_REPEAT}"
            i = found.end()
        elif c == "." or c in "^$\"" or ord(c) < 0x20 or body.startswith("(?", i):
            return (f"pattern character {c!r} at {i + 1} is not supported: no wildcard, lookaround or inner "
                    "anchor, and nothing that needs escaping in JSON (a quote, backslash or control character)")
        else:
            i += 1
    return None


def _class_end(body: str, start: int) -> tuple[int, str | None]:
    """The index after the class opening at `start`, and why it is refused (a negation, an escape other
    than \\[ or \\], or a range that reaches a quote, backslash or control character)."""
    i = start + 1
    if body.startswith("^", i):
        return i, "negated pattern classes [^...] are not supported: they could match a quote or backslash"
    chars: list[str] = []
    while i < len(body) and body[i] != "]":
        if body[i] == "\\":
            if body[i + 1:i + 2] not in ("[", "]") or i + 1 >= len(body):
                return i, f"pattern escape {body[i:i + 2]!r} inside a class is not supported"
            i += 1
        chars.append(body[i])
        i += 1
    if i >= len(body):
        return i, "pattern has a class without its closing ]"
    for k, c in enumerate(chars):
        low, high = (chars[k - 1], chars[k + 1]) if c == "-" and 0 < k < len(chars) - 1 else (c, c)
        if any(low <= bad <= high for bad in '"\\') or ord(low) < 0x20:
            return i, f"pattern class [{''.join(chars)}] reaches a quote, backslash or control character"
    return i + 1, None
