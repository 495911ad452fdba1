"""Quantize a GGUF file with llama.cpp's own quantizer (llama_model_quantize)."""

from __future__ import annotations

import re
from pathlib import Path

import llama_cpp
import structlog

from worker.engine.config import default_threads
from worker.engine.native import llama_log
from worker.progress_callback import ProgressFn
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)

# The quantizer logs one "[  12/ 272] name - [shape], type = ..." line per tensor: that is its progress.
_TENSOR_LINE = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]")


def quantize_model(src: Path, dst: Path, qtype: str,
                   progress: ProgressFn | None = None) -> None:
    """Write `src` quantized to `qtype` (a name such as "q4_k_m": LLAMA_FTYPE_MOSTLY_Q4_K_M) to `dst`."""
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype.upper()}", None)
    if ftype is None:
        raise WorkerError(f"llama.cpp has no quantization type {qtype!r}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = default_threads()

    def follow(line: str) -> None:
        if progress is not None and (m := _TENSOR_LINE.match(line)):
            progress("quantize", int(m[1]), int(m[2]))

    log.info("quantize_start", source=str(src), type=qtype)
    with llama_log.listening(follow):
        failed = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if failed:
        reason = llama_log.last_error("llama.cpp gave no reason")
        raise WorkerError(f"cannot quantize {src} to {qtype}: {reason}")
    log.info("quantize_done", out=str(dst), type=qtype, out_bytes=dst.stat().st_size)
