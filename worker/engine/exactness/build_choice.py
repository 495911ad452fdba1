"""Which llama.cpp library the process loads, chosen per model before llama_cpp is first imported.

llamafile's tinyBLAS (ggml-cpu/llamafile/sgemm.cpp) computes F32, F16 and BF16 matrix products of two or more rows
and leaves one-row products to ggml's vec_dot, which sums in another order. On such weights a row's logits depend
on how many rows its batch holds: the load-time check (load_check.py) measured both guarantees broken on F16 (rows
move with their neighbours; answers' cells differ from a prefill's), and so does attention without flash
attention, whose products take the F16 KV cells. No runtime switch turns tinyBLAS off, but a build of the same
llama.cpp without it (CMakePresets.json's no-llamafile) computes every row count through vec_dot. `make install`
builds it beside llama-cpp-python's own; exact and off modes on the cpu backend load it where such products run
(a LoRA adapter's tensors, F16 or F32 as convert_lora_to_gguf.py writes them, are multiplied like weights too), and
every other model keeps the default build, which is faster for them (bench/WEIGHTS.md). llama-cpp-python
binds its functions when imported, from LLAMA_CPP_LIB_PATH.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from worker.engine.config import EngineConfig
from worker.engine.exactness.tensor_table import weight_product_types
from worker.engine.modes import CacheMode

LIB_PATH_ENV = "LLAMA_CPP_LIB_PATH"  # read by llama_cpp/llama_cpp.py at import
# Where `make install` links the no-llamafile build (scripts/build-llama-cpp's output, cached per flags).
NO_LLAMAFILE_DIR = Path(sys.prefix) / "lib" / "llm-worker" / "no-llamafile"
TINYBLAS_TYPES = frozenset({"F32", "F16", "BF16"})  # what sgemm.cpp takes on x86 for 2+ rows and not for one


@dataclass(frozen=True)
class Library:
    build: str  # default (llama-cpp-python's own) | no-llamafile | LLAMA_CPP_LIB_PATH (the user's)
    path: str  # the directory libllama is loaded from
    reason: str  # one line: why this one


def default_dir() -> Path:
    """llama-cpp-python's own lib/, found without importing the package (its __init__ loads the library)."""
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.submodule_search_locations, "llama-cpp-python is not installed"
    return Path(spec.submodule_search_locations[0]) / "lib"


def choose_library(model: Path, config: EngineConfig, no_llamafile: Path = NO_LLAMAFILE_DIR) -> Library:
    """The build whose kernels keep this model's rows apart at the least cost, for this mode and backend."""
    if user := os.environ.get(LIB_PATH_ENV):
        return Library("LLAMA_CPP_LIB_PATH", user, f"{LIB_PATH_ENV} is set")
    default = str(default_dir())
    if config.prefix_cache is CacheMode.FAST or config.backend != "cpu" or config.rpc_servers:
        return Library("default", default, "rows may depend on their batch (fast mode), or not a cpu-only model")
    products = []
    if weights := sorted(set(weight_product_types(model)) & TINYBLAS_TYPES):
        products.append(f"{'/'.join(weights)} weights")
    if lora_types := sorted({kind for lora in config.lora for kind in weight_product_types(lora.path)}
                            & TINYBLAS_TYPES):
        products.append(f"{'/'.join(lora_types)} LoRA adapter tensors")
    if config.attention().flash_attn == "off":  # K·Q and V·softmax: matrix products of F16 cells
        products.append("attention without flash attention")
    if not products:
        return Library("default", default, "no matrix product that llamafile computes apart by row count")
    need = f"{' and '.join(products)}: llamafile computes 2+ rows in another order than one"
    if not (no_llamafile / "libllama.so").exists():
        return Library("default", default, f"{need}, and the no-llamafile build is not installed at {no_llamafile}"
                                           " (make install builds it): rows depend on their batch")
    return Library("no-llamafile", str(no_llamafile), need)


def load_library(library: Library) -> Library:
    """Point llama-cpp-python at the chosen library, and say which one the process has: the chosen one, or the one
    loaded already if llama_cpp was imported before the model was known (a conversion's llama_model_quantize in
    this process), as a process cannot load a second libllama."""
    if "llama_cpp" not in sys.modules:
        if library.build != "default":
            os.environ[LIB_PATH_ENV] = library.path
        return library
    loaded = loaded_library()
    if loaded == library.path:
        return library
    return Library(loaded_build(), loaded, f"llama.cpp was loaded before the model was known, where {library.build} "
                                           f"was chosen ({library.reason}): restart the worker to load it")


def loaded_library() -> str:
    """The directory this process's libllama came from (llama_cpp imported)."""
    return str(sys.modules["llama_cpp"].llama_cpp._base_path)


def loaded_build() -> str:
    """default | no-llamafile | LLAMA_CPP_LIB_PATH: which build this process loaded (llama_cpp imported)."""
    return {str(default_dir()): "default", str(NO_LLAMAFILE_DIR): "no-llamafile"}.get(loaded_library(),
                                                                                      "LLAMA_CPP_LIB_PATH")
