"""Supported architectures as data: GGUF keys from config.json, and each family's tensor quirks, each as llama.cpp's own
converter (conversion/*.py at 0c1e570) has them, so that llama.cpp loads our files exactly as it loads its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gguf
import numpy as np

from worker.worker_error import WorkerError

Config = dict[str, Any]
_REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """One GGUF key: the first config.json key of `keys` that is set, else `default` (or an error)."""

    writer: str  # the GGUFWriter method, e.g. "add_context_length"
    keys: tuple[str, ...]
    default: Any = None  # None: leave the key out when config.json has none of `keys`

    def value(self, config: Config) -> Any:
        for key in self.keys:
            if config.get(key) is not None:
                return config[key]
        if self.default is _REQUIRED:
            raise WorkerError(f"config.json has none of {', '.join(self.keys)}; it is needed for {self.writer[4:]}")
        return self.default


@dataclass(frozen=True)
class Derived:
    """A GGUF key computed from several config.json values (None: leave it out)."""

    writer: str
    compute: Callable[[Config], Any]


@dataclass(frozen=True)
class Transform:
    """A change to the tensors whose Hugging Face name ends with one of `suffixes`."""

    suffixes: tuple[str, ...]
    apply: Callable[[np.ndarray, Context], np.ndarray]
    shape: Callable[[tuple[int, ...], Context], tuple[int, ...]] = lambda shape, _ctx: shape


@dataclass(frozen=True)
class Context:
    config: Config
    n_vocab: int  # tokens in the written vocabulary


@dataclass(frozen=True)
class Architecture:
    gguf_arch: gguf.MODEL_ARCH
    hf_names: tuple[str, ...]  # config.json "architectures" values
    params: tuple[Param, ...]
    derived: tuple[Derived, ...] = ()
    transforms: tuple[Transform, ...] = ()
    skip: tuple[str, ...] = ()  # Hugging Face tensors llama.cpp has no use for
    add_space_prefix: bool | None = None  # for SentencePiece vocabs: llama.cpp's default is True
    rope_types: tuple[str, ...] = ("default", "linear", "yarn")

    @property
    def name(self) -> str:
        return gguf.MODEL_ARCH_NAMES[self.gguf_arch]


def _heads(config: Config) -> int:
    return config["num_attention_heads"]


def _kv_heads(config: Config) -> int:
    return config.get("num_key_value_heads") or config["num_attention_heads"]


def permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Hugging Face's Llama checkpoints order each head's rotary pairs as two halves; llama.cpp
    interleaves them. Same as llama.cpp's LlamaModel.permute (a pure reordering of rows)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _head_dim(config: Config) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


PERMUTE_Q = Transform(("q_proj.weight", "q_proj.bias"), lambda w, ctx: permute_rotary(w, _heads(ctx.config)))
PERMUTE_K = Transform(("k_proj.weight", "k_proj.bias"), lambda w, ctx: permute_rotary(w, _kv_heads(ctx.config)))
# Gemma's RMSNorm multiplies by (1 + weight); llama.cpp's by weight: store weight + 1.
NORM_PLUS_ONE = Transform(("norm.weight",), lambda w, _ctx: w + 1)
# Gemma 3 pads its embedding matrix past the tokenizer's vocabulary; llama.cpp wants one row per token.
TRIM_EMBEDDINGS = Transform(("embed_tokens.weight",), lambda w, ctx: w[: ctx.n_vocab],
                            lambda shape, ctx: (min(shape[0], ctx.n_vocab), *shape[1:]))

# TextModel.set_gguf_parameters: what every family writes.
COMMON = (
    Param("add_block_count", ("num_hidden_layers", "n_layers"), _REQUIRED),
    Param("add_context_length", ("max_position_embeddings", "n_ctx", "n_positions")),
    Param("add_embedding_length", ("hidden_size", "n_embd"), _REQUIRED),
    Param("add_feed_forward_length", ("intermediate_size", "n_inner")),
    Param("add_head_count", ("num_attention_heads", "n_head"), _REQUIRED),
    Param("add_head_count_kv", ("num_key_value_heads", "n_kv_heads")),
    Param("add_rope_freq_base", ("rope_theta",)),
    Param("add_layer_norm_rms_eps", ("rms_norm_eps",), _REQUIRED),
    Param("add_key_length", ("head_dim",)),
    Param("add_value_length", ("head_dim",)),
)


def _phi3_rope_dims(config: Config) -> int:
    factor = config.get("partial_rotary_factor", 1.0)
    return int(factor * config["hidden_size"]) // config["num_attention_heads"]


def _gemma3_sliding_window(config: Config) -> int | None:
    return None if config.get("sliding_window_pattern") == 1 else config.get("sliding_window")


LLAMA = Architecture(
    gguf.MODEL_ARCH.LLAMA, ("LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM"),
    (*COMMON, Param("add_vocab_size", ("vocab_size",), _REQUIRED)),
    derived=(Derived("add_rope_dimension_count", _head_dim),),
    transforms=(PERMUTE_Q, PERMUTE_K),
    rope_types=("default", "linear", "yarn", "llama3"),
)
QWEN2 = Architecture(gguf.MODEL_ARCH.QWEN2, ("Qwen2ForCausalLM",), COMMON)
QWEN3 = Architecture(gguf.MODEL_ARCH.QWEN3, ("Qwen3ForCausalLM",), COMMON)
PHI3 = Architecture(
    gguf.MODEL_ARCH.PHI3, ("Phi3ForCausalLM",),
    (
        *COMMON,
        Param("add_rope_scaling_orig_ctx_len", ("original_max_position_embeddings",), _REQUIRED),
        # 0 tells llama.cpp there is no sliding window (Phi-4 has none).
        Param("add_sliding_window", ("sliding_window",), 0),
    ),
    derived=(Derived("add_rope_dimension_count", _phi3_rope_dims),),
)
GEMMA2 = Architecture(
    gguf.MODEL_ARCH.GEMMA2, ("Gemma2ForCausalLM",),
    (*COMMON, Param("add_attn_logit_softcapping", ("attn_logit_softcapping",), _REQUIRED),
     Param("add_final_logit_softcapping", ("final_logit_softcapping",), _REQUIRED),
     Param("add_sliding_window", ("sliding_window",), _REQUIRED)),
    transforms=(NORM_PLUS_ONE,),
    skip=("lm_head.weight",),  # tied; some exports carry a copy llama.cpp never reads
    add_space_prefix=False,
)
# Gemma 3's config.json leaves out values that have defaults in transformers: the same defaults here.
GEMMA3 = Architecture(
    gguf.MODEL_ARCH.GEMMA3, ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"),
    (
        Param("add_block_count", ("num_hidden_layers",), _REQUIRED),
        Param("add_context_length", ("max_position_embeddings",), 131072),
        Param("add_embedding_length", ("hidden_size",), _REQUIRED),
        Param("add_feed_forward_length", ("intermediate_size",), _REQUIRED),
        Param("add_head_count", ("num_attention_heads",), 8),
        Param("add_head_count_kv", ("num_key_value_heads",), 4),
        Param("add_rope_freq_base", ("rope_theta",), 1_000_000.0),
        Param("add_rope_freq_base_swa", ("rope_local_base_freq",)),
        Param("add_layer_norm_rms_eps", ("rms_norm_eps",), 1e-6),
        Param("add_key_length", ("head_dim",), 256),
        Param("add_value_length", ("head_dim",), 256),
        Param("add_final_logit_softcapping", ("final_logit_softcapping",)),
    ),
    derived=(Derived("add_sliding_window", _gemma3_sliding_window),),
    transforms=(NORM_PLUS_ONE, TRIM_EMBEDDINGS),
    skip=("lm_head.weight",),
    add_space_prefix=False,
    rope_types=("default", "linear"),
)

ARCHITECTURES: dict[str, Architecture] = {
    name: arch for arch in (LLAMA, QWEN2, QWEN3, PHI3, GEMMA2, GEMMA3) for name in arch.hf_names
}

# Tensors no GGUF wants: caches of derived values, and the vision/audio towers of multimodal checkpoints.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".attention.masked_bias", ".attention.bias")
IGNORED_PREFIXES = ("vision_tower.", "multi_modal_projector.", "audio_tower.")
# Multimodal checkpoints nest the language model; llama.cpp's names are those of the bare text model.
STRIPPED_PREFIXES = ("language_model.",)


def architecture_for(hf_name: str) -> Architecture:
    arch = ARCHITECTURES.get(hf_name)
    if arch is None:
        raise WorkerError(
            f"architecture {hf_name!r} cannot be converted; supported: {', '.join(sorted(ARCHITECTURES))}"
        )
    return arch


def llama3_rope_factors(config: Config, rope: dict[str, Any]) -> np.ndarray:
    """Llama 3.1+ scales rotary frequencies by wavelength; llama.cpp reads the factors from a rope_freqs tensor."""
    base = config.get("rope_theta", 10000.0)
    dim = _head_dim(config)
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor = rope.get("factor", 8.0)
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old_ctx = rope.get("original_max_position_embeddings", 8192)
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            factors.append(1.0)
        elif wavelen > old_ctx / low:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


@dataclass(frozen=True)
class RopeScaling:
    """What config.json's rope_scaling turns into: GGUF keys and, for Llama 3, a factors tensor."""

    keys: list[tuple[str, Any]] = field(default_factory=list)
    rope_freqs: np.ndarray | None = None


def rope_scaling(arch: Architecture, config: Config) -> RopeScaling:
    rope = config.get("rope_scaling") or {}
    kind = (rope.get("rope_type") or rope.get("type") or "default").lower()
    if kind not in arch.rope_types:
        raise WorkerError(
            f"rope_scaling type {kind!r} is not supported for {arch.name} models "
            f"(supported: {', '.join(arch.rope_types)})"
        )
    if kind == "linear":
        return RopeScaling([("add_rope_scaling_type", gguf.RopeScalingType.LINEAR),
                            ("add_rope_scaling_factor", rope["factor"])])
    if kind == "yarn":
        return RopeScaling([("add_rope_scaling_type", gguf.RopeScalingType.YARN),
                            ("add_rope_scaling_factor", rope["factor"]),
                            ("add_rope_scaling_orig_ctx_len", rope["original_max_position_embeddings"])])
    if kind == "llama3":
        return RopeScaling(rope_freqs=llama3_rope_factors(config, rope))
    return RopeScaling()
