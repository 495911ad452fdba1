"""ggml CPU settings that keep a model's weight products independent of how many rows a batch holds, chosen from
the GGUF's tensor table (tensor_table.py) before llama.cpp loads the weights (docs/cache-and-exactness.md,
"Prefix cache")."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from worker.engine.exactness.tensor_table import weight_product_types

# "0" holds K-quant and IQ weights to vec_dot for every row where, without the batch-invariant build, ggml's tiled
# matmul takes 8+ rows in another order; read at its first matrix product (bench/probes/RESULTS.md, "Weight types").
TILED_MM_ENV = "GGML_CPU_TILED_MM"
# What ggml-cpu repacks on x86 (repack.cpp) whose GEMM (whole groups of rows) and GEMV (the rest) differ, unlike
# Q4_0's: a model holding one loads its weights as stored (bench/probes/RESULTS.md, "Weight types"). gguf-py's names.
REPACK_DIFFERS = frozenset({"Q4_K", "Q2_K", "IQ4_NL", "MXFP4"})


@dataclass(frozen=True)
class Kernels:
    tiled_mm: bool  # ggml's tiled K-quant matmul may take batches of 8+ rows
    repack: bool  # weights repacked for the CPU's GEMM (llama_model_params.use_extra_bufts)
    batch_invariant: bool = False  # ggml's GGML_CPU_BATCH_INVARIANT switch is on (the patched library)


FASTEST = Kernels(tiled_mm=True, repack=True)


def choose_kernels(path: Path, row_invariant: bool, switch_on: bool = False) -> Kernels:
    """The fastest settings, or, where rows must not depend on their batch, the fastest that keep them apart:
    with ggml's switch on (switch_on: switch_is_on()), K-quant rows sum in the tiled matmul's order whether 1 or 8+
    rows, so tiled products stay; without it they go."""
    if not row_invariant:
        return FASTEST
    repack = not (set(weight_product_types(path)) & REPACK_DIFFERS)
    return Kernels(tiled_mm=switch_on, repack=repack, batch_invariant=switch_on)


def apply(kernels: Kernels) -> None:
    """Set what ggml reads from the environment; before the process's first matrix product."""
    if not kernels.tiled_mm:
        os.environ[TILED_MM_ENV] = "0"


def switch_is_on(library_dir: str) -> bool:
    """Did the loaded ggml turn GGML_CPU_BATCH_INVARIANT on? False for a library without the switch. The CPU
    backend reads it once, when it first initializes (ggml_backend_cpu_reg does, and does nothing after)."""
    try:
        cpu = ctypes.CDLL(str(Path(library_dir) / "libggml-cpu.so"))  # loaded already: the same handle
    except OSError:
        return False
    query = getattr(cpu, "ggml_cpu_batch_invariant", None)
    if query is None:
        return False
    cpu.ggml_backend_cpu_reg.restype = ctypes.c_void_p
    cpu.ggml_backend_cpu_reg()
    query.restype = ctypes.c_bool
    return bool(query())
