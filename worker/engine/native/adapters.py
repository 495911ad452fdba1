"""LoRA adapters: loaded once onto the model (--lora), and set on the context before a call that needs others.
llama.cpp applies adapters to a whole context, not a sequence, so rows under different sets never share a
llama_decode (docs/models.md, "LoRA adapters")."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import structlog

from worker.engine.config import Lora
from worker.engine.exactness.tensor_table import NotReadable, header_strings
from worker.engine.native import llama_log
from worker.engine.requests import NO_ADAPTERS, AdapterSet
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)

# What a GGUF says it is for: an adapter's base (convert_lora_to_gguf.py writes general.base_model.*), or a model's.
_IDENTITY = ("general.architecture", "general.base_model.0.name", "general.name", "general.basename")
_REFUSAL = "failed to apply lora adapter: "  # llama_adapter_lora_init's log line, before llama.cpp's reason


@dataclass(frozen=True)
class LoadedAdapter:
    lora: Lora
    handle: llama_cpp.llama_adapter_lora_p_ctypes  # owned by the model: freed with it


def load_adapters(model: llama_cpp.llama_model_p, model_path: Path, loras: tuple[Lora, ...]) -> list[LoadedAdapter]:
    """Each --lora adapter loaded onto the model, in id order; WorkerError for one that is not for this model.
    llama.cpp checks it (general.type adapter, adapter.type lora, the same general.architecture, every tensor a base
    tensor of the same shape); a refusal names the adapter, what it was made for, and the model."""
    loaded: list[LoadedAdapter] = []
    for lora in loras:
        if not lora.path.is_file():
            raise WorkerError(f"--lora {lora.path}: no such file; pass a LoRA adapter GGUF "
                              "(convert_lora_to_gguf.py writes one from a PEFT folder)")
        llama_log.recent_errors.clear()
        handle = llama_cpp.llama_adapter_lora_init(model, str(lora.path).encode())
        if not handle:
            reason = llama_log.last_error("llama.cpp refused it").partition(_REFUSAL)
            raise WorkerError(f"--lora {lora.path} ({_identity(lora.path)}) does not fit the model {model_path} "
                              f"({_identity(model_path)}): {reason[2] or reason[0]}; pass an adapter made for this "
                              "base model")
        log.info("lora_loaded", id=len(loaded), name=lora.name, path=str(lora.path), scale=lora.scale)
        loaded.append(LoadedAdapter(lora, handle))
    return loaded


def _identity(path: Path) -> str:
    """What a GGUF's header says it is: its architecture and its (base) model's name."""
    try:
        strings = header_strings(path, frozenset(_IDENTITY))
    except NotReadable:
        return "not a GGUF"
    named = [strings[key] for key in _IDENTITY if key in strings]
    return ", ".join(dict.fromkeys(named)) or "no architecture named"


class AdapterSwitch:
    """The adapter set a context computes under, changed only when a call needs another (engine thread only).
    The scheduler groups a step's rows by set (core/scheduler.py) and the runner switches between calls: a switch
    makes llama.cpp rebuild its compute schedule at the next decode (sched_reserve; bench/probes/loraswitch.py)."""

    def __init__(self, ctx: llama_cpp.llama_context_p, adapters: list[LoadedAdapter]) -> None:
        self.ctx = ctx
        self.adapters = adapters
        self.current = NO_ADAPTERS  # a new context has none
        self.switches = 0  # counted for the engine's stats: each costs a rebuild of llama.cpp's schedule

    def use(self, wanted: AdapterSet) -> bool:
        """Run the context's next calls under `wanted`; True if that changed its set."""
        if wanted == self.current:
            return False
        count = len(wanted.scales)
        handles = (llama_cpp.llama_adapter_lora_p_ctypes * max(1, count))(
            *(self.adapters[adapter].handle for adapter, _ in wanted.scales))
        scales = (ctypes.c_float * max(1, count))(*(scale for _, scale in wanted.scales))
        llama_cpp.llama_set_adapters_lora(self.ctx, handles, count, scales)
        self.current = wanted
        self.switches += 1
        return True
