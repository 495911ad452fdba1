"""Ollama's `options` object -> the worker's sampling, answer length, stop strings and context bound, every problem
listed. Options that set how a model loads are refused with what to do, as is any option this worker does not know:
an option ignored would be a silent fallback (docs/api.md, "Ollama's API").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from worker.api.generation_fields import MAX_STOP_BYTES, MAX_STOP_STRINGS, read_sampling
from worker.api.problems import Problem, Reader
from worker.engine import SamplingParams
from worker.fields import OLLAMA_SAMPLING

# Ollama's options that set how the model is loaded: here the command line sets them, once.
LOAD_TIME = ("numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all", "vocab_only",
             "use_mmap", "use_mlock", "embedding_only", "num_thread")
# Accepted at the value that changes nothing, and only there: llama.cpp has no tail-free sampling any more.
NEUTRAL = {"tfs_z": 1}
# Accepted, changing nothing here: num_keep is what a context shift keeps (the worker never shifts: a full context
# is an error), penalize_newline acts only in Ollama's old runner.
NO_EFFECT = ("num_keep", "penalize_newline")
_NUMERIC: dict[str, dict[str, Any]] = {"num_keep": {"low": 0, "integer": True}}
UNLIMITED = (-1, -2)  # num_predict: without bound, or up to the end of the context: both are the context's end


@dataclass(frozen=True)
class Options:
    sampling: SamplingParams
    max_tokens: int | None  # None: up to the end of the context
    stop: tuple[str, ...]
    num_ctx: int | None  # the request's own context bound (prompt + answer), within the worker's per-slot context


def read_options(r: Reader, base: SamplingParams, n_ctx_seq: int) -> Options:
    """`options` over the model's defaults `base`; `n_ctx_seq`: the tokens one request may use here."""
    raw = r.body.get("options")
    if raw is None:
        return Options(base, None, (), None)
    if not isinstance(raw, dict):
        r.problem("options", "an object", "options must be an object of Ollama's model parameters", raw)
        return Options(base, None, (), None)
    nested = Reader({name: value for name, value in raw.items() if not (name == "seed" and value == -1)})
    sampling = read_sampling(nested, OLLAMA_SAMPLING, base)
    predict = nested.number("num_predict", None, low=-2, high=2**31 - 1, integer=True, nullable=True)
    if predict == 0:
        nested.problem("num_predict", "num_predict >= 1, or -1 or -2", "num_predict 0 would generate nothing: send "
                       "at least 1, or -1 for no bound", predict)
    num_ctx = nested.number("num_ctx", None, low=1, integer=True, nullable=True)
    if num_ctx is not None and num_ctx > n_ctx_seq:
        nested.problem("num_ctx", f"num_ctx <= {n_ctx_seq}", f"num_ctx must be at most {n_ctx_seq}: this worker "
                       f"gives a request {n_ctx_seq} tokens of context (its --ctx-size / --parallel): send a smaller "
                       "num_ctx, or none, or restart it with a larger --ctx-size", num_ctx)
        num_ctx = None
    stop = nested.stop_strings("stop", max_items=MAX_STOP_STRINGS, max_bytes=MAX_STOP_BYTES, allow_single=True)
    for name, bounds in _NUMERIC.items():
        nested.number(name, nullable=True, **bounds)
    nested.boolean("penalize_newline")
    _refused(nested, raw)
    r.problems += [replace(p, field=f"options.{p.field}", message=f"options.{p.message}") for p in nested.problems]
    max_tokens = None if predict in (None, 0, *UNLIMITED) else predict
    return Options(sampling, max_tokens, stop, num_ctx)


def _refused(r: Reader, raw: dict[str, Any]) -> None:
    known = {f.name for f in OLLAMA_SAMPLING} | {"num_predict", "num_ctx", "stop", *NO_EFFECT}
    for name, value in raw.items():
        if name in known:
            continue
        if name in NEUTRAL:
            if isinstance(value, bool) or value != NEUTRAL[name]:  # (false == 0 in Python, not in JSON)
                r.problems.append(Problem(name, f"{name} = {NEUTRAL[name]}", f"{name} is not supported here: send "
                                          f"{NEUTRAL[name]} or leave it out", value))
        elif name in LOAD_TIME:
            r.problems.append(Problem(name, "not per request", f"{name} sets how the model loads; this worker loaded "
                                      "it once, from its command line (llm-worker serve --help): leave it out",
                                      value))
        else:
            r.problems.append(Problem(name, "an Ollama option this worker knows", f"{name} is not an option this "
                                      "worker knows (docs/api.md, \"Ollama's API\" lists them)", value))
