"""Ollama's API for the clients that speak only it: request.py and options.py read a request, reply.py writes the
answer, route.py serves chat and generate, embed.py the embeddings, models.py the routes about models, schema.py is
its part of /openapi.json (docs/api.md, "Ollama's API")."""

from worker.api.ollama.embed import routes as embed_routes
from worker.api.ollama.models import routes as model_routes
from worker.api.ollama.route import routes

__all__ = ["embed_routes", "model_routes", "routes"]
