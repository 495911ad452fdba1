"""OpenAI's Responses API, /v1/responses: request.py reads it, items.py writes the answer, store.py keeps stored
responses, route.py serves it, schema.py is its part of /openapi.json."""

from worker.api.responses.route import routes, stores

__all__ = ["routes", "stores"]
