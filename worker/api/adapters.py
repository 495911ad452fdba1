"""Which LoRA adapters a generation runs under, as llama-server and vLLM decide it: a request's `lora` list, an
adapter its `model` names, or else the worker's current scales (docs/api.md, "LoRA adapters").
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.api.problems import Reader, finite, integral
from worker.engine import AdapterSet, Lora

FLOAT32_MAX = 3.4028234663852886e38  # a scale llama.cpp holds as a float


def finite_scale(value: Any) -> bool:
    """A number that stays finite as llama.cpp's float32 scale."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)
            and math.isfinite(ctypes.c_float(value).value) and abs(value) <= FLOAT32_MAX)


@dataclass
class Adapters:
    """The worker's adapters (id = place in `loras`) and the scale each is applied at when a request says none."""

    loras: tuple[Lora, ...]
    scales: list[float]

    @classmethod
    def loaded(cls, loras: tuple[Lora, ...], init_without_apply: bool) -> Adapters:
        return cls(loras, [0.0 if init_without_apply else lora.scale for lora in loras])

    def named(self, model: str | None) -> int | None:
        """The id of the adapter `model` names, if it names one."""
        return next((i for i, lora in enumerate(self.loras) if lora.name == model), None)

    def resolve(self, requested: Mapping[int, float] | None, model: str | None) -> AdapterSet:
        """The set one request runs under: its `lora` list and the adapter its `model` names, or else the worker's
        current scales.

        A `lora` list ([{id, scale}], llama-server's) replaces the worker's scales: adapters it leaves out are off. A
        `model` that names an adapter (vLLM's way) adds it at its --lora flag's scale. With neither, the scales are read
        as they are when the request arrives, so a POST /lora-adapters reaches the next request, never a running one.
        """
        named = self.named(model)
        if requested is None and named is None:
            return AdapterSet.of(dict(enumerate(self.scales)))
        chosen = {} if named is None else {named: self.loras[named].scale}
        return AdapterSet.of({**chosen, **(requested or {})})


def read_lora(r: Reader, n_adapters: int) -> dict[int, float] | None:
    """The body's `lora` list ([{id, scale}]) as {id: scale}; None when it has none. Every problem noted in `r`."""
    raw = r.body.get("lora")
    return None if raw is None else read_scales(r, "lora", raw, n_adapters)


def read_scales(r: Reader, field: str, raw: Any, n_adapters: int) -> dict[int, float]:
    """[{id, scale}] as {id: scale}: each id one of the worker's adapters, listed once, each scale finite."""
    if not isinstance(raw, list):
        r.problem(field, "a list of {id, scale}", f"{field} must be a list of {{id, scale}} objects", raw)
        return {}
    scales: dict[int, float] = {}
    seen: set[int] = set()
    for i, entry in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"id", "scale"}:
            r.problem(where, "{id, scale}", f"{where} must be an object of two fields, id and scale", entry)
            continue
        adapter, scale = _adapter_id(r, f"{where}.id", entry["id"], n_adapters), entry["scale"]
        if adapter in seen:
            r.problem(f"{where}.id", "each id once", f"{where}.id: adapter {adapter} is listed twice", adapter)
        elif adapter is not None:
            seen.add(adapter)
        if not finite_scale(scale):
            # JSON's 1e999 reads as infinity, which no JSON answer may hold: the value is echoed as text.
            r.problem(f"{where}.scale", "a finite number", f"{where}.scale must be a finite number",
                      repr(scale) if isinstance(scale, float) else scale)
        elif adapter is not None:
            scales[adapter] = float(scale)
    return scales


def _adapter_id(r: Reader, field: str, raw: Any, n_adapters: int) -> int | None:
    adapter = integral(raw)
    if not isinstance(adapter, bool) and isinstance(adapter, int) and 0 <= adapter < n_adapters:
        return adapter
    ids = f"0 <= id < {n_adapters}" if n_adapters else "none: the worker was started without --lora"
    r.problem(field, ids, f"{field} is {adapter!r}, not the id of one of this worker's {n_adapters} LoRA adapters "
              "(GET /lora-adapters lists them)", repr(adapter) if isinstance(adapter, float) else adapter)
    return None
