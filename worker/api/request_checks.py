"""What every route that runs the model checks first, the same way in every dialect: the model named is the one served
here (or one of its LoRA adapters). The served model checks the rest as it prepares the request
(engine/serving/input_processor.py)."""

from __future__ import annotations

from worker.api.error_shapes import UnknownModel
from worker.api.state import WorkerState


def served_model(worker: WorkerState, requested: str | None) -> str:
    """The model id the answer names: the served model's, or the LoRA adapter's the request named; a request that
    names another model is refused (404 model_not_found)."""
    if not worker.accepts_model(requested):
        adapters = [lora.name for lora in worker.adapters.loras]
        also = f" and its LoRA adapters {', '.join(map(repr, adapters))}" if adapters else ""
        raise UnknownModel(f"model {requested!r} is not served here; this worker serves {worker.model_id!r}{also}")
    return requested if requested and worker.adapters.named(requested) is not None else worker.model_id
