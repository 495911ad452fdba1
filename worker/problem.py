"""A problem with one field of a request: what the API lists in a 400, and what the engine names when it refuses an
input it was handed (engine/errors.py's Refused), each by the field the client sent."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    field: str
    constraint: str
    message: str
    value: Any = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
