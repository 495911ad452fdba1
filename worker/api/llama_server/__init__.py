"""llama-server's own routes, in its shapes: /tokenize, /detokenize, /apply-template (route.py), the slot routes
(slots.py); schema.py is their part of /openapi.json."""

from worker.api.llama_server import slots
from worker.api.llama_server.route import routes

slot_routes = slots.routes

__all__ = ["routes", "slot_routes"]
