"""One GGUF model and its llama.cpp context: load, warm up, tokenize, detokenize."""

from __future__ import annotations

import ctypes
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import structlog

from worker.engine.config import ROLLBACK_SNAPSHOTS, EngineConfig
from worker.engine.exactness import ggml_switches as kernels
from worker.engine.exactness.build_choice import loaded_library
from worker.engine.exactness.kv_plan import config_attention
from worker.engine.modes import SpecType
from worker.engine.native import llama_log
from worker.engine.native.adapters import AdapterSwitch, load_adapters
from worker.engine.native.backends import ggml, require_backend
from worker.engine.native.device_faults import device_attention
from worker.engine.native.memory import MemoryKind, memory_kind, probe, recurrent
from worker.engine.native.rpc import rpc_devices
from worker.progress_callback import ProgressFn
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)

GGUF_MAGIC = b"GGUF"


# ggml.h numbers BF16 30; the binding names no constant for it.
KV_CACHE_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "bf16": 30, "q8_0": llama_cpp.GGML_TYPE_Q8_0,
                  "q4_0": llama_cpp.GGML_TYPE_Q4_0}
FLASH_ATTN = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}
# One vector per input, as /v1/embeddings answers; llama.cpp's none (a vector per token) is not offered, and rank
# serves /v1/rerank (pooling/rerank.py) in a context of its own.
POOLING = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN, "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
           "last": llama_cpp.LLAMA_POOLING_TYPE_LAST}
EMBEDDING_SEQS = 64  # inputs one pooled decode may hold (each is a sequence of its own)


@dataclass(frozen=True)
class Pooled:
    """A context that pools each input into one output (pooling/embeddings.py feeds it): an embedding context
    (--embeddings) or a reranker's rank head (its GGUF's pooling_type rank)."""

    ctx: llama_cpp.llama_context_p
    n_batch: int  # the most tokens one input may hold: pooling reads a whole input from one ubatch
    width: int  # floats an output has: n_embd for an embedding, the head's outputs for a rank score
    normalize: bool  # L2-normalized (embeddings), or as the head computes it (scores)


# llama.cpp logs every buffer it allocates: "<buffer> model|KV|compute|output buffer size = <n> MiB".
_BUFFER_LINE = re.compile(r"(\S+)\s+(?:model|KV|compute|output|RS) buffer size = +([\d.]+) MiB")


@dataclass
class DeviceBuffers:
    """Adds up the buffers llama.cpp puts on devices (GPU, rpc), leaving out this machine's RAM.

    The binding has no call for it, and an rpc server reports the free memory it started with, so the
    sizes come from the lines llama.cpp logs as it allocates; CPU* and *_Host buffers live in RAM.
    """

    bytes: int = 0

    def __call__(self, line: str) -> None:
        if (found := _BUFFER_LINE.search(line)) and not found[1].startswith("CPU") and "_Host" not in found[1]:
            self.bytes += round(float(found[2]) * 2**20)


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise WorkerError(f"model file not found: {path}; check the --model path")
    with path.open("rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise WorkerError(
            f"{path} is not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r}); "
            "pass a .gguf model or convert it first"
        )


class LlamaModel:
    """Owns the llama_model, the llama_context and the vocab.

    Only the engine thread touches the context (and piece(), whose buffer it owns). tokenize() may run on the
    event loop at the same time: it only reads the vocab, which llama.cpp never changes after loading.
    """

    def __init__(self, path: Path, config: EngineConfig, progress: ProgressFn | None = None) -> None:
        llama_log.install()
        _check_file(path)
        device = require_backend(config.backend, config.device)
        self.path = path
        self.config = config
        # Exact and off modes hold each row to kernels that ignore the batch, on the cpu backend
        # (exactness/ggml_switches.py).
        row_invariant = config.rows_kept_apart
        switch_on = row_invariant and kernels.switch_is_on(loaded_library())
        self.kernels = kernels.choose_kernels(path, row_invariant, switch_on)
        kernels.apply(self.kernels)
        # The devices that take layers: this machine's GPU (none for cpu) and the rpc servers' ones.
        local = [ggml().ggml_backend_dev_get(device.index)] if device else []
        offload = local + list(rpc_devices(config.rpc_servers) if config.rpc_servers else ())
        buffers = DeviceBuffers()
        with llama_log.listening(buffers):
            self.model = self._load_model(path, config, local, offload, progress, self.kernels.repack)
            loaded = load_adapters(self.model, path, config.lora)
            self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self.model)
            self.attention = device_attention(
                config_attention(config, self._head_size_k(), self.kernels.batch_invariant), device, config.flash_attn)
            self.ctx = self._new_context(config)
            self.pooling = (config.pooling or self._gguf_pooling() or "mean") if config.embeddings else None
            self.embedding = self._new_pooled_context(config, POOLING[self.pooling], "embedding",
                                                      "start without --embeddings") if self.pooling else None
            self.ranking = self._new_pooled_context(config, llama_cpp.LLAMA_POOLING_TYPE_RANK, "rank", "serve "
                                                    "the model as a generative one") if self._gguf_ranks() else None
        self.device_bytes = buffers.bytes  # weights, KV cells and compute buffers off this machine's RAM
        self.adapters = AdapterSwitch(self.ctx, loaded)  # the LoRA adapters the context runs under, call by call
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_embd = llama_cpp.llama_model_n_embd_out(self.model)  # an embedding's width
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.memory_kind: MemoryKind = memory_kind(self.model, self.ctx)  # what a cut of a slot may undo
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx)
        self.n_ctx_seq = llama_cpp.llama_n_ctx_seq(self.ctx)
        self.size_bytes = llama_cpp.llama_model_size(self.model)
        self.n_params = llama_cpp.llama_model_n_params(self.model)
        self.add_bos = llama_cpp.llama_vocab_get_add_bos(self.vocab)
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._piece_buf = ctypes.create_string_buffer(256)

    @staticmethod
    def _load_model(path: Path, config: EngineConfig, local: list[int], offload: list[int],
                    progress: ProgressFn | None, repack: bool) -> llama_cpp.llama_model_p:
        params = llama_cpp.llama_model_default_params()
        params.use_extra_bufts = repack
        if progress is not None:
            # llama.cpp reports a fraction; the params struct keeps the callback alive for the load.
            params.progress_callback = llama_cpp.llama_progress_callback(
                lambda fraction, _data: progress("load", round(fraction * 100), 100) or True)
        params.n_gpu_layers = (-1 if offload else 0) if config.n_gpu_layers is None else config.n_gpu_layers
        if config.rpc_servers:
            # The offload devices, NULL-terminated (cpu keeps what is not offloaded); the loader
            # splits the layers by free memory.
            devices = (ctypes.c_void_p * (len(offload) + 1))(*offload, None)
            params.devices = ctypes.cast(devices, ctypes.c_void_p)
            params.split_mode = llama_cpp.LLAMA_SPLIT_MODE_LAYER
        elif local:
            params.split_mode = llama_cpp.LLAMA_SPLIT_MODE_NONE
            params.main_gpu = config.device
        llama_log.recent_errors.clear()
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            reason = llama_log.last_error("llama.cpp refused it")
            raise WorkerError(
                f"cannot load model {path}: {reason}; the file may be truncated, corrupt or of an "
                "architecture this llama.cpp does not support: re-download or re-convert it"
            )
        return model

    def _new_context(self, config: EngineConfig) -> llama_cpp.llama_context_p:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = config.ctx_size or self.n_ctx_train
        params.n_seq_max = config.parallel
        params.n_batch = config.batch_size
        params.n_ubatch = config.micro_batch
        params.n_threads = params.n_threads_batch = config.threads
        # One KV stream per sequence: a request's output never depends on its neighbours
        # (measured: a unified cache made 2 of 4 concurrent greedy streams drift).
        params.kv_unified = False
        # A recurrent state undoes a rejected draft from snapshots kept for that (native/memory.py).
        if config.drafting is not SpecType.NONE and recurrent(self.model):
            params.n_rs_seq = min(config.draft_max, ROLLBACK_SNAPSHOTS)
        params.no_perf = True
        attention = self.attention
        params.type_k = KV_CACHE_TYPES[attention.cache_type_k]
        params.type_v = KV_CACHE_TYPES[attention.cache_type_v]
        params.flash_attn_type = FLASH_ATTN[attention.flash_attn]
        return self._init_context(
            params, f"a context of {params.n_ctx} tokens with K cache {attention.cache_type_k}, "
                    f"V cache {attention.cache_type_v}, flash attention {attention.flash_attn}",
            "try a smaller --ctx-size, or other --cache-type-k/--cache-type-v/--flash-attn")

    def _new_pooled_context(self, config: EngineConfig, pooling: int, what: str, fix: str) -> Pooled:
        """A context /v1/embeddings or /v1/rerank decodes in, on the same weights. Pooling reads a whole input from
        one ubatch, so batch = ubatch = KV cells: the most tokens one input may hold."""
        size = min(config.micro_batch, self.n_ctx_train)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = size
        params.n_seq_max = EMBEDDING_SEQS
        # One stream all a decode's inputs share, each its own sequence: cleared after every decode.
        params.kv_unified = True
        params.embeddings = True
        params.pooling_type = pooling
        params.n_threads = params.n_threads_batch = config.threads
        params.no_perf = True
        # The same attention as generation: with flash attention held to its per-row kernel, each input's vector
        # is independent of the inputs decoded beside it.
        params.flash_attn_type = FLASH_ATTN[self.attention.flash_attn]
        params.type_k = KV_CACHE_TYPES[self.attention.cache_type_k]
        params.type_v = KV_CACHE_TYPES[self.attention.cache_type_v]
        ctx = self._init_context(params, f"an {what} context of {size} tokens",
                                 f"try a smaller --ubatch-size, or {fix}")
        ranks = pooling == llama_cpp.LLAMA_POOLING_TYPE_RANK
        width = llama_cpp.llama_model_n_cls_out(self.model) if ranks else llama_cpp.llama_model_n_embd_out(self.model)
        return Pooled(ctx, size, width, normalize=not ranks)

    def _init_context(self, params: llama_cpp.llama_context_params, what: str, fix: str) -> llama_cpp.llama_context_p:
        llama_log.recent_errors.clear()
        ctx = llama_cpp.llama_init_from_model(self.model, params)
        if not ctx:
            reason = llama_log.last_error("llama.cpp could not create a context")
            raise WorkerError(f"cannot create {what}: {reason}; {fix}")
        return ctx

    def _head_size_k(self) -> int:
        """The width of one attention head's K: the GGUF's `<arch>.attention.key_length`, else n_embd / n_head."""
        arch = self._meta("general.architecture")
        key_length = self._meta(f"{arch}.attention.key_length") if arch else None
        if key_length and key_length.isdigit():
            return int(key_length)
        return llama_cpp.llama_model_n_embd(self.model) // max(1, llama_cpp.llama_model_n_head(self.model))

    def _gguf_pooling(self) -> str | None:
        """The pooling the GGUF names (`<arch>.pooling_type`: embedding models have one, generative ones don't)."""
        value = self._pooling_type()
        return next((name for name, kind in POOLING.items() if str(kind) == value), None)

    def _gguf_ranks(self) -> bool:
        """Whether the GGUF is a reranker: pooling_type rank, its classification head llama.cpp's to run."""
        return self._pooling_type() == str(llama_cpp.LLAMA_POOLING_TYPE_RANK)

    def _pooling_type(self) -> str | None:
        arch = self._meta("general.architecture")
        return self._meta(f"{arch}.pooling_type") if arch else None

    def metadata(self) -> dict[str, str]:
        """The GGUF's key-value metadata as llama.cpp prints it, arrays (the tokenizer's vocabulary) left out."""
        found = {}
        buf = ctypes.create_string_buffer(1024)
        for i in range(llama_cpp.llama_model_meta_count(self.model)):
            if llama_cpp.llama_model_meta_key_by_index(self.model, i, buf, len(buf)) < 0:
                continue
            key = buf.value.decode("utf-8", errors="replace")
            n = llama_cpp.llama_model_meta_val_str_by_index(self.model, i, buf, len(buf))
            value = buf.value.decode("utf-8", errors="replace")
            if 0 <= n < len(buf) and not value.startswith("["):  # an array, or a value longer than any scalar
                found[key] = value
        return found

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    def warm_up(self) -> None:
        """One tiny decode so the first real request does not pay for lazy allocations, then the memory kind checked
        against what llama.cpp does with a cut."""
        bos = llama_cpp.llama_vocab_bos(self.vocab)
        token = bos if bos >= 0 else 0
        tokens = (llama_cpp.llama_token * 1)(token)
        if llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(tokens, 1)) != 0:
            raise WorkerError(f"warm-up decode failed: {llama_log.last_error('unknown error')}")
        llama_cpp.llama_synchronize(self.ctx)
        self.clear_cells()
        probe(self.memory_kind, self.ctx, token)

    def clear_cells(self) -> None:
        """Every cell of every sequence emptied, its data cleared: on the CPU backend patch 0013 clears a buffer by
        giving its pages back, so cells written before serving (the warm-up, the load-time check, the draft passes'
        timing) stop holding memory until requests write there again."""
        llama_cpp.llama_memory_clear(self.memory, True)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        # A token never covers less than one byte, plus room for BOS/EOS.
        capacity = len(data) + 4
        buf = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            raise WorkerError(f"tokenizer needed {-n} tokens for a {len(data)}-byte text")
        return buf[:n]

    def piece(self, token: int) -> bytes:
        """The bytes one token contributes to the output (control tokens contribute none)."""
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self._render(token, special=False)
        return cached

    def token_text(self, token: int) -> str:
        """A token as text, control tokens included (for chat templates' BOS/EOS)."""
        if token < 0:  # the vocab has no such token (e.g. no BOS)
            return ""
        return self._render(token, special=True).decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        """A token's bytes, control tokens spelled out; with a buffer of its own, so any thread may call it."""
        return self._render(token, special=True, buf=ctypes.create_string_buffer(64))

    def detokenize(self, tokens: list[int]) -> bytes:
        """Token ids (all valid: llama.cpp does not check) -> bytes, control tokens spelled out.

        llama.cpp's inverse of tokenize (a SentencePiece vocab's added leading space removed);
        it only reads the vocab, so any thread may call it.
        """
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        buf = ctypes.create_string_buffer(4 * len(tokens) + 16)
        n = llama_cpp.llama_detokenize(self.vocab, array, len(tokens), buf, len(buf), False, True)
        if n < 0:  # -n is the size it needs
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_detokenize(self.vocab, array, len(tokens), buf, len(buf), False, True)
        return buf.raw[:n]

    def _render(self, token: int, *, special: bool, buf: ctypes.Array | None = None) -> bytes:
        buf = self._piece_buf if buf is None else buf
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:  # the piece is longer than the buffer: -n is the size it needs
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    @property
    def bos_token(self) -> int:
        return llama_cpp.llama_vocab_bos(self.vocab)

    @property
    def bos_text(self) -> str:
        return self.token_text(llama_cpp.llama_vocab_bos(self.vocab))

    @property
    def eos_text(self) -> str:
        return self.token_text(llama_cpp.llama_vocab_eos(self.vocab))

    @functools.cached_property
    def eog_tokens(self) -> tuple[int, ...]:
        """The vocabulary's end-of-generation tokens (llama-server's logit_bias_eog), found once: a scan of them all."""
        return tuple(token for token in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def is_eog(self, token: int) -> bool:
        known = self._eog.get(token)
        if known is None:
            known = self._eog[token] = llama_cpp.llama_vocab_is_eog(self.vocab, token)
        return known

    def fim_tokens(self) -> dict[str, int]:
        """The fill-in-the-middle tokens the vocabulary has (llama_vocab_fim_*): pre, suf, mid, rep, sep."""
        found = {name: getattr(llama_cpp, f"llama_vocab_fim_{name}")(self.vocab)
                 for name in ("pre", "suf", "mid", "rep", "sep")}
        return {name: token for name, token in found.items() if token != llama_cpp.LLAMA_TOKEN_NULL}

    def chat_template(self, name: str | None = None) -> str | None:
        """The GGUF's chat template, or its template called `name` (a reranker's "rerank"); None: it has none."""
        raw = llama_cpp.llama_model_chat_template(self.model, name.encode() if name else None)
        return raw.decode("utf-8") if raw else None

    def pair_tokens(self, first: str, second: str) -> list[int]:
        """Two texts as one input, as llama-server gives a rank head a query and a document:
        [BOS] first [EOS] [SEP] second [EOS], each special token where the vocab asks for it (SEP for a missing EOS)."""
        vocab = self.vocab
        eos = llama_cpp.llama_vocab_eos(vocab)
        eos = eos if eos != llama_cpp.LLAMA_TOKEN_NULL else llama_cpp.llama_vocab_sep(vocab)
        ends = [eos] if llama_cpp.llama_vocab_get_add_eos(vocab) else []
        tokens = [llama_cpp.llama_vocab_bos(vocab)] if self.add_bos else []
        tokens += self.tokenize(first, add_special=False, parse_special=False) + ends
        tokens += [llama_cpp.llama_vocab_sep(vocab)] if llama_cpp.llama_vocab_get_add_sep(vocab) else []
        return tokens + self.tokenize(second, add_special=False, parse_special=False) + ends

    def close(self) -> None:
        llama_cpp.llama_free(self.ctx)
        for pooled in (self.embedding, self.ranking):
            if pooled is not None:
                llama_cpp.llama_free(pooled.ctx)
        llama_cpp.llama_model_free(self.model)
