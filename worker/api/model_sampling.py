"""A model's sampling defaults, field by field: its models.toml entry's value, else its GGUF's general.sampling.* key
(llama.cpp's converter writes them from the model's generation_config.json), else llama-server's own default. Made
once at startup (lifecycle/run.py); a field a request leaves out comes from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.api.generation_fields import read_sampling
from worker.api.problems import Reader, integral
from worker.engine import SamplingParams
from worker.fields import GGUF_PREFIX, GGUF_SAMPLING, OPENAI_SAMPLING, NumberField, OrderField
from worker.worker_error import WorkerError

# llama-server's defaults (common_params_sampling) where they differ from the neutral chain: what a request gets
# when neither it, the models.toml entry nor the GGUF sets a field.
LLAMA_SERVER_DEFAULTS = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
PER_MODEL = tuple(f for f in OPENAI_SAMPLING if f.per_model)
# Where a default came from, as the startup log says it.
MODELS_TOML, GGUF, LLAMA_SERVER = "models.toml", "gguf", "llama-server"
SEQUENCE_SEPARATOR = ";"  # general.sampling.sequence joins the stages' names with it


@dataclass(frozen=True)
class SamplingDefaults:
    params: SamplingParams
    origins: dict[str, str]  # each field a models.toml entry may set -> where its default came from

    def described(self) -> dict[str, dict[str, Any]]:
        """Each field's default and its origin, as the startup log line carries them."""
        return {f.name: {"value": getattr(self.params, f.sets), "from": self.origins[f.name]} for f in PER_MODEL}


def check_entry(table: dict[str, Any]) -> None:
    """A models.toml entry's sampling table held to the request fields' names and ranges, before the model loads: a
    WorkerError listing every problem."""
    _read(table, SamplingParams(), "models.toml sampling defaults: ")


def model_defaults(entry: dict[str, Any], metadata: dict[str, str]) -> SamplingDefaults:
    """The defaults of a model whose models.toml entry's sampling table is `entry` (checked by check_entry) and whose
    GGUF's metadata (as llama.cpp prints it) is `metadata`. A GGUF value out of a field's range is a WorkerError, unless
    the entry sets that field: the entry's then stands in for it."""
    gguf = {name: value for name, value in gguf_sampling(metadata).items() if name not in entry}
    keys = {f.name: GGUF_PREFIX + f.gguf for f in GGUF_SAMPLING if f.gguf}
    from_gguf = _read(gguf, LLAMA_SERVER_DEFAULTS, "the GGUF's ", keys,
                      fix="; a models.toml entry's sampling table overrides a key (docs/models.md)")
    params = _read(entry, from_gguf, "models.toml sampling defaults: ")
    origins = {f.name: MODELS_TOML if f.name in entry else GGUF if f.name in gguf else LLAMA_SERVER for f in PER_MODEL}
    return SamplingDefaults(params, origins)


def gguf_sampling(metadata: dict[str, str]) -> dict[str, Any]:
    """The general.sampling.* keys the GGUF has, as the request fields they set: numbers as numbers, the sequence as
    its names (a value that is neither stays text, for the reader to refuse)."""
    return {f.name: _GGUF_VALUE[type(f)](metadata[GGUF_PREFIX + f.gguf]) for f in GGUF_SAMPLING
            if f.gguf and GGUF_PREFIX + f.gguf in metadata}


def _number(text: str) -> Any:
    try:
        return integral(float(text))
    except ValueError:
        return text


_GGUF_VALUE: dict[type, Callable[[str], Any]] = {NumberField: _number,
                                                 OrderField: lambda text: text.split(SEQUENCE_SEPARATOR)}


def _read(table: dict[str, Any], base: SamplingParams, where: str, keys: dict[str, str] | None = None,
          fix: str = "") -> SamplingParams:
    """`table`'s fields over `base`, or a WorkerError listing every problem; `keys`: the names the table's source
    gives its fields, said before each problem."""
    r = Reader(table)
    params = read_sampling(r, PER_MODEL, base)
    if r.problems:
        named = [f"{keys[p.field]}: {p.message}" if keys else p.message for p in r.problems]
        raise WorkerError(where + "; ".join(named) + fix)
    return params

