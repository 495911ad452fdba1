"""Anthropic's Messages API, POST /v1/messages: request.py reads it, blocks.py writes the answer, route.py serves it."""

from worker.api.anthropic.route import routes

__all__ = ["routes"]
