"""What the HTTP side knows about the worker: its phase, its served model, its running jobs."""

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
    from worker.engine import ServedModel


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
    served: ServedModel | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)  # the model's defaults under each request
    jobs: dict[str, Callable[[], None]] = field(default_factory=dict)  # pool-manager job_id -> its cancel()
    progress: LoadingProgress | None = None
    adapters: Adapters = field(default_factory=lambda: Adapters((), []))  # --lora's, once the model is loaded
    metrics: Metrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = Metrics(lambda: self.served.stats() if self.served is not None else None,
                               lambda: [lora.name for lora in self.adapters.loras])

    def require_served(self) -> ServedModel:
        if self.phase is not Phase.READY or self.served is None:
            raise NotReady(f"the worker is {self.phase.value}")
        return self.served

    @property
    def state(self) -> str:
        """The contract's /v1/ready state: loading | idle | busy | draining | error."""
        if self.phase is not Phase.READY or self.served is None:
            return self.phase.value
        stats = self.served.stats()
        return "busy" if stats.running or stats.waiting else "idle"

    def vram_bytes(self) -> int:
        """The one rule /health, the ready callback and the /execute metrics event all report."""
        return self.served.facts.device_bytes if self.served is not None else 0

    def cache_ram(self) -> dict[str, int]:
        """Host memory for KV cells pushed out of slots: its bound (--cache-ram) and what it holds now, as /health
        and the ready callback report them (several workers share a machine's memory under a pool manager)."""
        stats = self.served.stats() if self.served is not None else None
        return {"cache_ram_limit_bytes": stats.cache_ram_limit_bytes if stats else 0,
                "cache_ram_bytes": stats.cache_ram_bytes if stats else 0}

    def intake(self, served: ServedModel) -> MediaIntake:
        """What a request's content may hold here: the --media-* settings and the loaded model's inputs."""
        return MediaIntake(self.settings.media, served.prompts.input_modalities)

    def accepts_model(self, name: str | None) -> bool:
        return name in (None, "", self.model_id, self.settings.model) or self.adapters.named(name) is not None


WORKER = web.AppKey("worker", WorkerState)
