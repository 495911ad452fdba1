"""llama-server's own routes, in its shapes: /tokenize, /detokenize, /apply-template (route.py), /lora-adapters
(lora_adapters.py), /v1/rerank and /rerank (rerank.py), the slot routes (slots.py), /props (props.py), /infill
(infill.py); schema.py is their part of /openapi.json."""

from worker.api.llama_server import slots
from worker.api.llama_server.infill import routes as infill_routes
from worker.api.llama_server.lora_adapters import routes as lora_routes
from worker.api.llama_server.props import routes as props_routes
from worker.api.llama_server.rerank import routes as rerank_routes
from worker.api.llama_server.route import routes

slot_routes = slots.routes

__all__ = ["infill_routes", "lora_routes", "props_routes", "rerank_routes", "routes", "slot_routes"]
