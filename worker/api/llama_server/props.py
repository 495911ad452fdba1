"""llama-server's GET /props, in its shape: the sampling defaults a request starts from (api/model_sampling.py) under
llama-server's names, the slots and their context, the model's file, chat template, special tokens and inputs. What
the worker cannot fill honestly is left out: llama-server's build and web UI settings, and the seed, random unless a
request sends one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from worker.api.state import WORKER, WorkerState
from worker.fields import LLAMA_SERVER_SAMPLING

if TYPE_CHECKING:
    from worker.engine import ServedModel

routes = web.RouteTableDef()
UNBOUNDED = -1  # llama-server's n_predict for "up to the end of the context", as a request's answer runs here


@routes.get("/props")
async def props(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    return web.json_response(described(worker, worker.require_served()))


def described(worker: WorkerState, served: ServedModel) -> dict[str, Any]:
    facts, prompts = served.facts, served.prompts
    params: dict[str, Any] = {f.name: getattr(worker.sampling, f.sets) for f in LLAMA_SERVER_SAMPLING}
    params |= {"n_predict": UNBOUNDED, "max_tokens": UNBOUNDED}
    return {
        "default_generation_settings": {"params": params, "n_ctx": facts.n_ctx_seq},
        "total_slots": facts.parallel,
        "model_alias": worker.model_id,
        "model_path": str(facts.path),
        # Images with a projector (--mmproj); audio and video are refused.
        "modalities": {"vision": "image" in prompts.input_modalities, "audio": "audio" in prompts.input_modalities,
                       "video": False},
        "chat_template": prompts.template_source or "",
        # What llama.cpp's Jinja engine finds the template does (supports_tools, supports_tool_calls, ...).
        "chat_template_caps": prompts.chat.caps,
        "bos_token": prompts.bos_text,
        "eos_token": prompts.eos_text,
        "endpoint_slots": True,
        "endpoint_props": False,  # nothing changes the defaults once the model is loaded (llama-server's --props)
        "endpoint_metrics": True,
    }
