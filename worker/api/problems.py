"""Request validation that collects every problem instead of stopping at the first."""

from __future__ import annotations

import json
import math
from typing import Any

from worker.engine import Refused
from worker.problem import Problem

_MISSING = object()


def finite(value: int | float) -> bool:
    """A number a double holds: JSON's 1e999 reads as infinity, and an integer past ~1.8e308 has no double at all
    (math.isfinite raises for it, and ctypes refuses it as a float argument, on the engine's thread)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def integral(value: Any) -> Any:
    """JSON has one number type: 79.0 is the integer 79, as JSON Schema says; anything else is unchanged."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class InvalidRequest(Refused):
    """A request refused as it is read, every problem listed: a 400, as the served model's refusals (Refused)."""


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _has_lone_surrogate(value: Any) -> bool:
    """JSON escapes like "\\ud800" decode to text that no UTF-8 encoder (or tokenizer) accepts."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Strict JSON (UTF-8 only, no NaN/Infinity, no lone surrogates) whose top level is an object."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise InvalidRequest([Problem("body", "a JSON object",
                                      f"the body must be a JSON object, not {type(body).__name__}")])
    return body


def parse_json(raw: bytes) -> Any:
    """Strict JSON (UTF-8 only, no NaN/Infinity, no lone surrogates) of any shape."""
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        lone_surrogate = _has_lone_surrogate(body)
    except RecursionError:
        raise InvalidRequest([Problem("body", "nesting depth", "the JSON is nested too deeply")]) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise InvalidRequest([Problem("body", "valid JSON", f"the body is not valid UTF-8 JSON: {exc}")]) from None
    if lone_surrogate:
        raise InvalidRequest([Problem("body", "valid Unicode",
                                      "the body has a lone UTF-16 surrogate (\\ud800-\\udfff)")])
    return body


class Reader:
    """Typed reads from a JSON object; each bad field adds a Problem, `done()` raises them all."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.problems: list[Problem] = []

    def problem(self, field: str, constraint: str, message: str, value: Any = None) -> None:
        self.problems.append(Problem(field, constraint, message, value))

    def done(self) -> None:
        if self.problems:
            raise InvalidRequest(self.problems)

    def _get(self, name: str, required: bool) -> Any:
        value = self.body.get(name, _MISSING)
        if value is _MISSING and required:
            self.problem(name, "required", f"{name} is required")
        return value

    def number(
        self, name: str, default: Any = None, *, low: float | None = None, high: float | None = None,
        integer: bool = False, required: bool = False, nullable: bool = False,
    ) -> Any:
        value = self._get(name, required)
        if value is _MISSING or (value is None and nullable):
            return default
        if integer:
            value = integral(value)
        kind = "an integer" if integer else "a number"
        constraint = " <= ".join(str(x) for x in (low, name, high) if x is not None)
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type or not (integer or finite(value)):
            self.problem(name, kind, f"{name} must be {kind}", value)
            return default
        if (low is not None and value < low) or (high is not None and value > high):
            self.problem(name, constraint, f"{name} must satisfy {constraint}", value)
            return default
        return value

    def string(self, name: str, default: Any = None, *, required: bool = False,
               min_length: int = 0, max_length: int | None = None) -> Any:
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            self.problem(name, "a string", f"{name} must be a string", value)
            return default
        if len(value) < min_length or (max_length is not None and len(value) > max_length):
            bounds = f"{min_length} <= len({name})" + (f" <= {max_length}" if max_length is not None else "")
            self.problem(name, bounds, f"{name} has {len(value)} characters; it must satisfy {bounds}", len(value))
            return default
        return value

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self._get(name, False)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, bool):
            self.problem(name, "a boolean", f"{name} must be true or false", value)
            return default
        return value

    def stop_strings(self, name: str, *, max_items: int, max_bytes: int, allow_single: bool) -> tuple[str, ...]:
        value = self._get(name, False)
        if value is _MISSING or value is None:
            return ()
        if allow_single and isinstance(value, str):
            value = [value]
        constraint = f"up to {max_items} strings of at most {max_bytes} bytes"
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            self.problem(name, constraint, f"{name} must be a list of strings", value)
            return ()
        if len(value) > max_items:
            self.problem(name, constraint, f"{name} has {len(value)} strings; at most {max_items} are allowed",
                         len(value))
            return ()
        too_long = [s for s in value if len(s.encode()) > max_bytes]
        if too_long:
            self.problem(name, constraint, f"{name} has a string over {max_bytes} bytes", too_long[0][:120])
            return ()
        empty = [s for s in value if not s]
        if empty:
            self.problem(name, "non-empty strings", f"{name} strings must not be empty", value)
            return ()
        return tuple(value)
