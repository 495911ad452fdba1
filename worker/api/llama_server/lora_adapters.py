"""GET /lora-adapters lists the worker's LoRA adapters with the scale each is applied at; POST /lora-adapters sets
those scales, in llama-server's shapes. What the scales mean for a request: api/adapters.py."""

from __future__ import annotations

import structlog
from aiohttp import web

from worker.api.adapters import read_scales
from worker.api.problems import Reader, parse_json
from worker.api.state import WORKER

routes = web.RouteTableDef()
log = structlog.get_logger("worker.request")


@routes.get("/lora-adapters")
async def list_adapters(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    worker.require_served()
    adapters = worker.adapters
    return web.json_response([{"id": i, "path": str(lora.path), "scale": adapters.scales[i], "name": lora.name}
                              for i, lora in enumerate(adapters.loras)])


@routes.post("/lora-adapters")
async def set_scales(request: web.Request) -> web.Response:
    """[{id, scale}]: the listed adapters at their scales, every other one at 0 (as llama-server does); requests
    already running keep the adapters they started with."""
    worker = request.app[WORKER]
    worker.require_served()
    adapters = worker.adapters
    r = Reader({})
    scales = read_scales(r, "body", parse_json(await request.read()), len(adapters.loras))
    r.done()
    adapters.scales = [scales.get(i, 0.0) for i in range(len(adapters.loras))]
    log.info("lora_scales_set", scales=adapters.scales)
    return web.json_response({"success": True})
