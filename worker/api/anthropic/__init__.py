"""Anthropic's Messages API, POST /v1/messages: request.py reads it, blocks.py writes the answer, route.py serves it,
schema.py is its part of /openapi.json."""

from worker.api.anthropic.route import routes

__all__ = ["routes"]
