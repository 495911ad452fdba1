"""The HTTP side: OpenAI-compatible routes and the pool-manager contract."""

from worker.api.app import build_app
from worker.api.state import WORKER, Phase, WorkerState

__all__ = ["WORKER", "Phase", "WorkerState", "build_app"]
