"""What the API reads of the model it serves, fixed once the model is loaded and warm: its sizes, its adapters, and
the exactness report that startup logs and /health returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.engine.config import Lora


@dataclass(frozen=True)
class Exactness:
    """What the prefix cache promises and why: said once at load (model_loaded) and on /health."""

    prefix_cache: str  # exact | fast | off
    library: str  # the build loaded (exactness/build_choice.py): default | batch-invariant | LLAMA_CPP_LIB_PATH
    ggml_batch_invariant: bool  # ggml's GGML_CPU_BATCH_INVARIANT switch on (exactness/ggml_switches.py)
    flash_attn: str  # on | off | auto (llama.cpp's choice, fast mode)
    cache_type_k: str
    cache_type_v: str
    attention_pinned: bool  # flash attention held to one kernel per row whatever the batch (exactness/kv_plan.py)
    # Why the device runs attention otherwise than the flags planned: a configuration it is known to crash on
    # (native/device_faults.py); None: as planned.
    attention_workaround: str | None
    tiled_mm: bool  # ggml's tiled K-quant matmul allowed (exactness/ggml_switches.py)
    repack: bool  # weights repacked for the CPU's GEMM
    # The load-time check (startup/load_check.py), exact mode only, on any backend; None: not measured (another mode).
    decoded_cells_exact: bool | None
    batch_invariant: bool | None
    moved_cells_exact: bool | None  # cells loaded from host memory or copied between slots: as where they were made
    answers_reused: bool  # answers' cells reused: fast mode, or exact where the load-time check measured them equal
    speculative: str  # --spec-type: none | ngram | draft
    # Drafts cannot change the text: the load-time check found a sequence's rows decoded together equal to
    # one-token decodes, beside other rows, on a backend whose yes is trusted, in exact or off mode; None: no drafts.
    drafts_keep_text: bool | None
    # What a slot's memory lets a cut undo (native/memory.py): anywhere (attention cells); last-tokens (a recurrent
    # state with snapshots: a draft's rejected tokens); whole (a recurrent state: reused only from where it ends).
    memory: str
    rollback_tokens: int  # last-tokens: how many

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ModelFacts:
    n_ctx_seq: int  # tokens one request may use: prompt + generated
    n_vocab: int
    parallel: int  # slots: requests decoded side by side, and the most choices one request may ask for
    size_bytes: int  # the GGUF's weights
    device_bytes: int  # memory llama.cpp took on GPU or rpc devices at load (weights, KV, compute); 0 on cpu alone
    loras: tuple[Lora, ...]  # the adapters loaded at startup (--lora), in id order: a request's AdapterSet names them
    exactness: Exactness
    path: Path  # the GGUF served
    n_params: int
    metadata: dict[str, str]  # the GGUF's scalar metadata (general.architecture...), for Ollama's /api/show
    micro_batch: int  # llama.cpp's n_ubatch: the most tokens of an image decoded whole (MediaSpan.whole)
