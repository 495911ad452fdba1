"""Anthropic's output_config: `format` (a JSON schema the answer follows) as the grammar the answer samples under,
by OpenAI's response_format converter (worker/api/structured.py), so the same schemas are honored and refused.
"""

from __future__ import annotations

from typing import Any

from worker.api.problems import Reader
from worker.api.structured import checked_schema

_FORMAT = '{"type": "json_schema", "schema": {...}}'


def output_grammar(r: Reader) -> str | None:
    """output_config.format -> the answer's grammar (None: unconstrained)."""
    config = r.body.get("output_config")
    if config is None:
        return None
    if not isinstance(config, dict):
        r.problem("output_config", "an object", "output_config must be an object {\"format\": ...}", config)
        return None
    spec: Any = config.get("format")
    if spec is None:
        return None
    if not isinstance(spec, dict) or spec.get("type") != "json_schema" or not isinstance(spec.get("schema"), dict):
        r.problem("output_config.format", _FORMAT, f"the format must be {_FORMAT}", spec)
        return None
    return checked_schema(r, "output_config.format.schema", spec["schema"])
