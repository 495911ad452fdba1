"""The HTTP side: one package per dialect (openai, anthropic, responses, orch, llama_server), each with its route,
its request reader and its part of /openapi.json, over what they share: the preamble every generation passes
(request_checks.py), the generation fields (generation_fields.py), submitting and tracking a generation (generation.py),
error shapes (errors.py), tool calling (tools/)."""

from worker.api.app import build_app
from worker.api.state import WORKER, Phase, WorkerState

__all__ = ["WORKER", "Phase", "WorkerState", "build_app"]
