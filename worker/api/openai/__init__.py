"""OpenAI's API: /v1/chat/completions, /v1/completions and /v1/models (route.py), /v1/embeddings (embeddings.py);
request.py reads the generation bodies, logprobs.py writes OpenAI's logprob shapes, schema.py is this dialect's part
of /openapi.json."""

from worker.api.openai.embeddings import routes as embedding_routes
from worker.api.openai.route import routes

__all__ = ["embedding_routes", "routes"]
