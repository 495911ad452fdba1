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


MAX_LISTED = 16  # problems listed one by one; the rest are counted


def listed(problems: list[Problem], field: str, constraint: str) -> list[Problem]:
    """A bad body can hold a million bad inputs: list MAX_LISTED problems, then count the rest."""
    if len(problems) <= MAX_LISTED:
        return problems
    more = len(problems) - MAX_LISTED
    return [*problems[:MAX_LISTED], Problem(field, constraint, f"and {more} more problems with {field}", more)]
