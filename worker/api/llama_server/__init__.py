"""llama-server's own routes, in its shapes: /tokenize, /detokenize, /apply-template (route.py); schema.py is their
part of /openapi.json."""

from worker.api.llama_server.route import routes

__all__ = ["routes"]
