"""What the HTTP side knows about the worker: its phase, its engine, its running jobs."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from worker.api.adapters import Adapters
from worker.api.images import MediaIntake
from worker.api.loading_progress import LoadingProgress
from worker.api.metrics import Metrics
from worker.engine import SamplingParams
from worker.settings import Settings

if TYPE_CHECKING:
    from worker.engine import Engine


class Phase(str, enum.Enum):
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    ERROR = "error"


class NotReady(Exception):
    """The model is not loaded yet (or the worker is going away): answer 503."""


@dataclass
class WorkerState:
    settings: Settings
    model_id: str
    phase: Phase = Phase.LOADING
    engine: Engine | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)  # the model's defaults under each request
    jobs: dict[str, Callable[[], None]] = field(default_factory=dict)  # pool-manager job_id -> its cancel()
    progress: LoadingProgress | None = None
    adapters: Adapters = field(default_factory=lambda: Adapters((), []))  # --lora's, once the engine is loaded
    metrics: Metrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = Metrics(lambda: self.engine.stats() if self.engine is not None else None)

    def require_engine(self) -> Engine:
        if self.phase is not Phase.READY or self.engine is None:
            raise NotReady(f"the worker is {self.phase.value}")
        return self.engine

    @property
    def state(self) -> str:
        """The contract's /v1/ready state: loading | idle | busy | draining | error."""
        if self.phase is not Phase.READY or self.engine is None:
            return self.phase.value
        stats = self.engine.stats()
        return "busy" if stats.running or stats.waiting else "idle"

    def intake(self, engine: Engine) -> MediaIntake:
        """What a request's content may hold here: the --media-* settings and the loaded model's inputs."""
        return MediaIntake(self.settings.media, engine.input_modalities)

    def accepts_model(self, name: str | None) -> bool:
        return name in (None, "", self.model_id, self.settings.model) or self.adapters.named(name) is not None


WORKER = web.AppKey("worker", WorkerState)
