"""The one timestamp format the pool-manager contract uses: UTC ISO 8601 ending in "Z"."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_now(timespec: str = "milliseconds") -> str:
    """Now, e.g. "2025-01-31T12:00:00.123Z"; `timespec` as datetime.isoformat takes it."""
    return datetime.now(timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")
