"""The HTTP side: one package per dialect (openai, anthropic, responses, orch, llama_server), each with its route,
its request reader and its part of /openapi.json, over what they share: the checks every generation passes first
(request_checks.py), a chat as the engine takes it (chat_input.py), preparing, submitting and tracking a generation
(generation.py: the served model's prepare makes the engine's requests), error shapes
(error_shapes.py), tool calling (tools/)."""

from worker.api.app import build_app
from worker.api.state import WORKER, Phase, WorkerState

__all__ = ["WORKER", "Phase", "WorkerState", "build_app"]
