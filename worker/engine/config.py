"""How the engine runs a model: the flags' EngineConfig and the defaults it starts from. Free of llama_cpp, so
settings and the HTTP routes can be built before the worker chooses which llama.cpp library to load
(exactness/build_choice.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from worker.engine.modes import CacheMode, SpecType

# --ubatch-size on the cpu backend. Its compute buffer, in RAM there, grows with the micro-batch (the attention
# scores are ubatch x KV cells x heads floats): 256 holds ~24 MiB less than llama.cpp's 512 on the test model after
# a 1,500-token prompt and prefilled no slower (docs/cache-and-exactness.md, "KV cache types and flash attention").
CPU_UBATCH_SIZE = 256

# --draft-max (llama-server's --spec-draft-n-max is 3 for a draft model, 48 for its n-gram lookups): long copied
# runs are where drafts pay on the CPU (speculative/draft_rule.py), and the rule there cuts each draft to what pays.
DRAFT_MAX = 16

# Drafts on a model with a recurrent state (Mamba, the recurrent half of a hybrid) are undone through snapshots
# llama.cpp keeps of every slot's state (n_rs_seq), one a token: a draft there is at most this long.
ROLLBACK_SNAPSHOTS = 4


@dataclass(frozen=True)
class Lora:
    """A LoRA adapter the worker loads at startup (--lora): its GGUF, its name (what /v1/models lists and a request's
    `model` may name) and the scale its flag gave (1 unless PATH:SCALE said otherwise). Its id is its place in
    EngineConfig.lora, as llama-server numbers them."""

    path: Path
    name: str
    scale: float = 1.0


def default_batch_size(backend: str) -> int:
    """On the cpu backend a prefill chunk is one micro-batch, so more would not be used. On a GPU a chunk is the
    whole batch, which llama.cpp runs as micro-batches back to back without waiting between them: llama.cpp's 2048,
    as llama-server (core/scheduler.py, chunk_budget)."""
    return 512 if backend == "cpu" else 2048


def default_ubatch_size(backend: str) -> int:
    """A GPU backend's compute buffer is not in RAM and its prefill speed at 256 was not measured: llama.cpp's 512."""
    return CPU_UBATCH_SIZE if backend == "cpu" else 512


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class EngineConfig:
    backend: str = "cpu"
    device: int = 0
    n_gpu_layers: int | None = None  # None: all layers on a GPU backend or rpc servers, none on cpu alone
    rpc_servers: tuple[str, ...] = ()  # host:port of ggml-rpc-server processes that take layers too
    ctx_size: int | None = None  # all slots together; 0: the model's training context; None: not given
    parallel: int = 4  # sequence slots decoded together
    batch_size: int = 512  # tokens per llama_decode call (prefill chunks + decode tokens)
    ubatch_size: int = CPU_UBATCH_SIZE  # physical micro-batch; a prefill chunk exceeds it on a GPU alone
    threads: int = default_threads()
    max_queue: int = 64
    prefix_cache: CacheMode = CacheMode.EXACT
    cache_ram: int = 8192  # MiB of host memory for slots' cells dropped for other prompts (host_cache.py); 0: none
    kv_dir: Path | None = None  # where reusable cells outlive the process (kv/disk_cache.py); None: nowhere
    kv_dir_mib: int = 8192  # the bound on kv_dir's cell files, oldest removed first
    cache_type_k: str | None = None  # KV cell types: one of KV_CACHE_TYPES; None: the mode's (exactness/kv_plan.py)
    cache_type_v: str | None = None
    flash_attn: str = "auto"  # one of FLASH_ATTN
    # llama-server's --reasoning-format: deepseek (a thinking model's reasoning read into reasoning_content), auto (the
    # same), deepseek-legacy (left in the content when streamed), none (left in the content)
    reasoning_format: str = "deepseek"
    embeddings: bool = False  # a second context for /v1/embeddings (engine/pooling/embeddings.py)
    pooling: str | None = None  # one of POOLING; None: the GGUF's own, mean where it names none
    spec_type: SpecType = SpecType.NONE  # speculative decoding's drafts (speculative/speculator.py); see drafting
    model_draft: Path | None = None  # the draft model's GGUF, for SpecType.DRAFT
    draft_max: int = DRAFT_MAX  # drafted tokens a sequence puts in one step, at most
    draft_min: int = 0  # fewer than this are not worth verifying: the sequence drafts none
    mmproj: Path | None = None  # a multimodal projector (GGUF): images in prompts (native/projector.py)
    lora: tuple[Lora, ...] = ()  # adapters a request may run under (native/adapters.py), in id order

    def __post_init__(self) -> None:
        # The engine compares modes by identity (`is CacheMode.FAST`): a script's "fast" must become the member,
        # or it would silently run as exact.
        object.__setattr__(self, "prefix_cache", CacheMode(self.prefix_cache))
        object.__setattr__(self, "spec_type", SpecType(self.spec_type))

    @property
    def micro_batch(self) -> int:
        """llama.cpp's n_ubatch: --ubatch-size, at most --batch-size."""
        return min(self.ubatch_size, self.batch_size)

    @property
    def on_cpu_alone(self) -> bool:
        """Every layer on this process's CPU (no GPU backend, no rpc servers): the kernels the exactness rules know."""
        return self.backend == "cpu" and not self.rpc_servers

    @property
    def rows_kept_apart(self) -> bool:
        """Exact and off modes on the CPU alone: where the worker holds every row to one arithmetic."""
        return self.prefix_cache is not CacheMode.FAST and self.on_cpu_alone

    @property
    def drafting(self) -> SpecType:
        """The drafts the engine starts with. --spec-type auto is prompt lookup where rows are kept apart, so that
        drafts cannot change the text (the load-time check confirms it, or the engine stops drafting: engine.py),
        and none elsewhere: there a drafted row may compute differently and change greedy text."""
        if self.spec_type is SpecType.AUTO:
            return SpecType.NGRAM if self.rows_kept_apart else SpecType.NONE
        return self.spec_type
