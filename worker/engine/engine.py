"""The engine contract the API sees: load, submit -> async events, cancel, stats."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import structlog

from worker.engine.config import Lora
from worker.engine.constraints.grammar import grammar_problem
from worker.engine.core.loop import EngineLoop
from worker.engine.core.runner import Events
from worker.engine.core.scheduler import SchedulerStats
from worker.engine.errors import AdapterCells, ContextLengthExceeded, EmptyPrompt
from worker.engine.exactness.build_choice import loaded_build
from worker.engine.handle import RequestHandle
from worker.engine.handoff import Handoff
from worker.engine.kv import cell_file
from worker.engine.kv.disk_cache import DiskCache
from worker.engine.kv.fingerprint import Fingerprint, engine_fingerprint
from worker.engine.kv.host_cache import MIB
from worker.engine.modes import CacheMode, SpecType
from worker.engine.native.model import EngineConfig, LlamaModel, ProgressFn
from worker.engine.native.projector import Bitmap, Projector
from worker.engine.output.reasoning import opens_in_prompt
from worker.engine.pooling.embeddings import EMBEDDINGS, RANK, EmbeddingJob, Outcome, Vector, check_inputs
from worker.engine.pooling.rerank import (
    EMPTY_THINKING,
    RANK_HEAD,
    YES_NO,
    Reranker,
    filled,
    relevance_messages,
    yes_no_scores,
)
from worker.engine.requests import ChatPrompt, Reasoning, Request
from worker.engine.sequence import Sequence
from worker.engine.serving.chat_template import ChatTemplate
from worker.engine.startup.guarantee import Guarantee, guarantee
from worker.engine.startup.load_check import Numerics, measure

log = structlog.get_logger(__name__)

MOVED_CELLS_INEXACT = ("cells loaded from host memory or copied from another slot gave other logits than where "
                       "they were made in the load-time check")


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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SlotFile:
    """A slot's cells written to a file or read from one (POST /slots/{id}?action=save|restore)."""

    tokens: int
    bytes: int
    ms: float


class Engine:
    def __init__(self, model: LlamaModel, loop: asyncio.AbstractEventLoop, chat_template: str | None = None,
                 template_kwargs: dict[str, Any] | None = None, projector: Projector | None = None) -> None:
        self.model = model
        self.projector = projector  # None: text only (no --mmproj)
        self.chat = ChatTemplate(chat_template or model.chat_template(), bos_text=model.bos_text,
                                 eos_text=model.eos_text)
        self.template_kwargs = template_kwargs or {}  # a models.toml entry's, under each request's
        self.reranker = self._reranker()
        self._loop = loop
        self._events = Handoff(loop, self._deliver)  # each step's generation events, engine thread -> loop
        self._steps = EngineLoop(model, model.config.prefix_cache, self._events.post, projector)
        self._warm = threading.Event()
        self.numerics = Numerics(None, None)  # measured at warm-up in exact mode
        self._warm_up_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)
        self._disk: DiskCache | None = None  # --kv-dir

    @classmethod
    def load(cls, path: Path, config: EngineConfig, loop: asyncio.AbstractEventLoop,
             progress: ProgressFn | None = None, chat_template: str | None = None,
             template_kwargs: dict[str, Any] | None = None) -> Engine:
        """Blocking: load the GGUF, create the context, start the engine thread, warm it up.

        Events are delivered on `loop`; `progress` hears the load and warmup stages;
        `chat_template` replaces the GGUF's own and `template_kwargs` sets its variables (models.toml).
        """
        model = LlamaModel(path, config, progress)
        projector = None
        try:
            projector = Projector(config.mmproj, model) if config.mmproj else None
            engine = cls(model, loop, chat_template, template_kwargs, projector)
        except BaseException:  # a draft model that cannot draft for it, or a projector made for another model
            if projector is not None:
                projector.close()
            model.close()
            raise
        if progress is not None:
            progress("warmup", 0, 1)
        engine._thread.start()
        engine._warm.wait()
        if engine._warm_up_error is not None:
            model.close()
            raise engine._warm_up_error
        if progress is not None:
            progress("warmup", 1, 1)
        if config.kv_dir is not None:
            engine._open_kv_dir(config.kv_dir, config.kv_dir_mib * MIB)
        stats = engine.stats()
        restored = {"kv_restored_entries": stats.disk.restored_entries,
                    "kv_restored_tokens": stats.disk.restored_tokens} if stats.disk else {}
        log.info("model_loaded", path=str(path), n_ctx=model.n_ctx, n_ctx_seq=model.n_ctx_seq,
                 slots=config.parallel, size_bytes=model.size_bytes, backend=config.backend,
                 chat_template="models.toml" if chat_template else "gguf",
                 mmproj=str(config.mmproj) if config.mmproj else None, input_modalities=engine.input_modalities,
                 **engine.exactness.as_dict(),
                 embeddings_pooling=model.pooling,
                 embeddings_max_tokens=model.embedding.n_batch if model.embedding else 0,
                 rerank=engine.reranker.route if engine.reranker else None, lora=[lora.name for lora in config.lora],
                 cache_ram_limit_bytes=stats.cache_ram_limit_bytes, **restored)
        # Said on every backend, as a warning where less than the full promise holds in exact or off mode.
        promise = engine.guarantee
        quiet = promise.full or config.prefix_cache is CacheMode.FAST
        (log.info if quiet else log.warning)("exactness_guarantee", guarantee=promise.name, holds=promise.holds)
        if engine.numerics.batch_invariant is False:
            log.warning("exactness_limited", reason="a row's logits changed with the rows beside it in the load-time "
                        "check: greedy text may depend on what runs beside a request; the prefix cache still reuses "
                        "only whole prefilled blocks", fix="serve with --parallel 1, or a weight type and backend "
                        "docs/cache-and-exactness.md lists as exact")
        if engine.numerics.moved_cells_exact is False and config.prefix_cache is CacheMode.EXACT:
            log.warning("exactness_limited", reason=f"{MOVED_CELLS_INEXACT}: exact mode reuses a slot's own cells "
                        "only, and copies none between slots, loads none back from host memory, --kv-dir or a slot "
                        "file", fix="a weight type and backend docs/cache-and-exactness.md lists as exact")
        if config.spec_type is SpecType.AUTO and config.drafting is not SpecType.NONE and not engine.drafting:
            log.info("drafts_off", reason=engine._drafts_reason(), spec_type="auto")
        if engine.exactness.drafts_keep_text is False:
            log.warning("drafts_may_change_text", reason=engine._drafts_reason(),
                        fix="serve in exact mode on the cpu backend, or with --spec-type none")
        return engine

    def _drafts_reason(self) -> str:
        numerics = self.numerics
        if self.model.config.prefix_cache is CacheMode.FAST:
            return "fast mode lets llama.cpp pick kernels by batch shape, so a drafted row may compute differently"
        if not numerics.trusted:
            return (f"the load-time check is not trusted on the {self.model.config.backend} backend"
                    f"{' with rpc' if self.model.config.rpc_servers else ''}: its kernels change with batch shape")
        return ("the load-time check found a sequence's rows decoded together unequal to one-token decodes, or a row "
                "changed by the rows beside it: greedy text with drafts may differ from text without")

    def _run(self) -> None:
        # Every decode, the warm-up included, runs on this one thread: ggml's OpenMP
        # pool belongs to the thread that first computes, and decoding from a second
        # thread measured 3x slower (36 ms vs 11 ms a token on the test model).
        try:
            self.model.warm_up()
            self._steps.measure_passes()
            config = self.model.config
            mode = config.prefix_cache
            if mode is CacheMode.EXACT or (self._steps.speculator and mode is CacheMode.OFF):
                self.numerics = measure(self.model)
                if self.numerics.answers_reusable:
                    self._steps.cache.trust_decoded_cells()
                if self.numerics.moved_cells_exact is False:
                    self._steps.cache.distrust_moved_cells()
            if config.spec_type is SpecType.AUTO and self._steps.speculator and not self.numerics.drafts_keep_text:
                self._steps.stop_drafting()  # load() says why
        except BaseException as exc:  # handed to load()'s caller
            self._warm_up_error = exc
            return
        finally:
            self._warm.set()
        self._steps.run()

    def _open_kv_dir(self, folder: Path, limit_bytes: int) -> None:
        """Put the cells a worker of this fingerprint left in `folder` into host memory, before serving."""
        host = self._steps.cache.host
        if host is None:  # settings refuse --kv-dir without --cache-ram: nothing could hold the cells
            raise ValueError("--kv-dir needs host memory for cells (--cache-ram)")
        self._disk = DiskCache(folder, limit_bytes, self.fingerprint)
        if not self._steps.cache.moves:  # its cells could only be loaded back, which this numerics forbids
            log.warning("kv_dir_not_read", folder=str(folder), reason=MOVED_CELLS_INEXACT)
            return
        for saved in self._disk.load(host.limit_bytes):
            host.add(saved)

    @cached_property
    def fingerprint(self) -> Fingerprint:
        """What this worker's cells' numerics depend on: saved cells load only under the same (kv/fingerprint.py)."""
        return engine_fingerprint(self.model)

    async def persist(self) -> None:
        """Write what the free slots and host memory hold that this mode reuses to --kv-dir (kv/disk_cache.py);
        nothing without --kv-dir."""
        disk = self._disk
        if disk is None:
            return
        new, still_held = await asyncio.wrap_future(self._steps.free_slots_cells(disk.known))
        entries = self._steps.cache.host.entries if self._steps.cache.host else []
        # Cells belong to the adapter set they were made under (kv/prefix_cache.py), and a file's fingerprint
        # names none: only cells made without adapters go to disk (a loaded file's cells serve requests without
        # adapters); those made under adapters stay in host memory only (CellTransfer.snapshots skips slots' too).
        host = [entry for entry in entries if not entry.adapters]
        if len(host) < len(entries):
            log.debug("kv_dir_cells_skipped", entries=len(entries) - len(host), reason="made under LoRA adapters")
        await asyncio.to_thread(disk.write, [*host, *new], still_held)

    async def save_slot(self, slot: int, path: Path) -> SlotFile:
        """Write a slot's reusable cells to `path`, once the slot is free (waiting for its request to leave)."""
        started = time.perf_counter()
        saved = await asyncio.wrap_future(self._steps.on_slot(slot, lambda cells: cells.snapshot(slot)))
        if saved is None:
            raise MemoryError(f"no host memory for slot {slot}'s cells")
        if saved.adapters:  # a file holds base-model cells only, as --kv-dir's do (persist)
            raise AdapterCells(slot, str(saved.adapters))
        written = await asyncio.to_thread(cell_file.write, path, await self._fingerprinted(), saved)
        return SlotFile(len(saved.tokens), written, (time.perf_counter() - started) * 1e3)

    async def restore_slot(self, slot: int, path: Path) -> SlotFile:
        """Load the cells a file holds into a slot, once it is free; raises cell_file.UnusableFile (or OSError) for
        a file that must not load, naming why."""
        started = time.perf_counter()
        if not self._steps.cache.moves:
            raise cell_file.UnusableFile(f"{MOVED_CELLS_INEXACT}; exact mode restores no cells here (fast mode does)")
        saved = await asyncio.to_thread(cell_file.read, path, await self._fingerprinted())
        if not await asyncio.wrap_future(self._steps.on_slot(slot, lambda cells: cells.load(slot, saved))):
            raise cell_file.UnusableFile("llama.cpp refused its cells")
        read = (await asyncio.to_thread(path.stat)).st_size
        return SlotFile(len(saved.tokens), read, (time.perf_counter() - started) * 1e3)

    async def erase_slot(self, slot: int) -> int:
        """Empty a slot once it is free: the cells it held."""
        return await asyncio.wrap_future(self._steps.on_slot(slot, lambda cells: cells.erase(slot)))

    def busy_slots(self) -> set[int]:
        return self._steps.busy_slots()

    async def _fingerprinted(self) -> Fingerprint:
        """The fingerprint, worked out off the event loop the first time (it hashes the model file)."""
        return await asyncio.to_thread(lambda: self.fingerprint)

    @property
    def exactness(self) -> Exactness:
        attention, kernels, numerics = self.model.attention, self.model.kernels, self.numerics
        return Exactness(self.model.config.prefix_cache.value, loaded_build(), kernels.batch_invariant,
                         attention.flash_attn, attention.cache_type_k, attention.cache_type_v, attention.pinned,
                         kernels.tiled_mm, kernels.repack, numerics.decoded_cells_exact, numerics.batch_invariant,
                         numerics.moved_cells_exact,
                         # answers' cells reused: fast mode, or exact where the numerics allow (startup/load_check.py)
                         self._steps.cache.every_cell,
                         self._steps.speculator.kind.value if self._steps.speculator else SpecType.NONE.value,
                         self._drafts_keep_text)

    @property
    def guarantee(self) -> Guarantee:
        """What holds for greedy text on this backend, mode and measurement: logged at startup."""
        config = self.model.config
        return guarantee(config.prefix_cache, self.numerics, config.backend, bool(config.rpc_servers))

    @property
    def drafting(self) -> bool:
        """Whether decode rows may carry drafts (--spec-type, as the load-time check left it)."""
        return self._steps.speculator is not None

    @property
    def _drafts_keep_text(self) -> bool | None:
        if not self.drafting:
            return None
        return self.model.config.prefix_cache is not CacheMode.FAST and self.numerics.drafts_keep_text

    @property
    def n_ctx_seq(self) -> int:
        """Tokens one request may use: prompt + generated."""
        return self.model.n_ctx_seq

    @property
    def loras(self) -> tuple[Lora, ...]:
        """The LoRA adapters loaded at startup (--lora), in id order: a request's AdapterSet names them by id."""
        return self.model.config.lora

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def size_bytes(self) -> int:
        return self.model.size_bytes

    @property
    def device_bytes(self) -> int:
        """Memory llama.cpp took on GPU or rpc devices at load (weights, KV, compute); 0 on cpu alone."""
        return self.model.device_bytes

    def tokenize(self, text: str) -> list[int]:
        return self.model.tokenize(text, add_special=self.model.add_bos)

    def chat_text(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any] | None = None,
                  prefill: str = "", tools: list[dict[str, Any]] | None = None) -> str:
        """The conversation through the chat template: the prompt's text.

        `template_kwargs`: extra template variables (chat_template_kwargs) over the model's own; `prefill`
        starts the answer for the model to continue (after the template's generation prompt); `tools`: the
        tools on offer."""
        return self.chat.render(messages, {**self.template_kwargs, **(template_kwargs or {})}, tools) + prefill

    def chat_prompt(self, prompt: str, images: list[Bitmap] | None = None) -> ChatPrompt:
        """A chat_text's tokens, and how to split the reply if the model thinks. `images`: one for each
        image_marker in the text, in order (decode_image's), tokenized by the projector."""
        # A template that writes BOS itself must not get a second one from the tokenizer.
        add_bos = self.model.add_bos and not prompt.startswith(self.chat.bos_text)
        reasoning = None
        if self.chat.thinks and self.model.config.reasoning_format == "deepseek":
            reasoning = Reasoning(opened_in_prompt=opens_in_prompt(prompt))
        if images:
            assert self.projector is not None  # the API refuses images without one (it names --mmproj)
            media = self.projector.tokenize(prompt, images, add_special=add_bos)
            return ChatPrompt(media.tokens, reasoning, media.spans)
        return ChatPrompt(self.model.tokenize(prompt, add_special=add_bos), reasoning)

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """What a prompt may hold, as llama-server's /v1/models says it: text, and image with a projector."""
        return self.projector.input_modalities if self.projector else ("text",)

    def decode_image(self, data: bytes) -> Bitmap:
        """An image's pixels, hashed for the cache; raises ImageUnreadable. Any thread (the API's)."""
        assert self.projector is not None  # the API refuses images without one
        return self.projector.decode_image(data)

    def grammar_problem(self, text: str) -> str | None:
        """Why llama.cpp would refuse `text` as a request's grammar, or None: checked before queueing, so the
        engine thread never meets a grammar it cannot build. Reads only the vocab, so any thread may call it."""
        return grammar_problem(self.model.vocab, text)

    def submit(self, request: Request) -> RequestHandle:
        """Queue a request; raises ContextLengthExceeded, EmptyPrompt or loop.QueueFull up front."""
        return self.submit_choices([request])[0]

    def submit_choices(self, choices: list[Request]) -> list[RequestHandle]:
        """Queue several choices of one prompt (they differ in sampling): the prompt is prefilled once
        and its cells copied to the others' slots. At most `parallel` choices: they run side by side."""
        first = choices[0]
        if len(choices) > self.model.config.parallel:
            raise ValueError(f"{len(choices)} choices need more than the {self.model.config.parallel} slots")
        if any(choice.prompt_tokens != first.prompt_tokens for choice in choices):
            raise ValueError("the choices of one request share its prompt")
        n_prompt = len(first.prompt_tokens)
        if n_prompt == 0:
            raise EmptyPrompt("the prompt is empty after tokenization")
        longest = max(choice.max_tokens for choice in choices)
        if n_prompt + longest > self.n_ctx_seq:
            raise ContextLengthExceeded(n_prompt, longest, self.n_ctx_seq)
        sequences = [Sequence(choice) for choice in choices]
        parent, forks = sequences[0], sequences[1:]
        parent.forks = forks
        for fork in forks:
            fork.parent = parent
        handles = []
        for sequence in sequences:
            sequence.handle = RequestHandle(partial(self._steps.cancel, sequence))
            handles.append(sequence.handle)
        self._steps.add(parent)
        return handles

    def stats(self) -> SchedulerStats:
        stats = self._steps.stats()
        return replace(stats, disk=self._disk.stats) if self._disk is not None else stats

    @property
    def pooling(self) -> str | None:
        """How /v1/embeddings pools a vector per input: mean, cls or last; None: started without --embeddings."""
        return self.model.pooling

    @property
    def embedding_width(self) -> int:
        return self.model.n_embd

    def _reranker(self) -> Reranker | None:
        """How this model scores documents for /v1/rerank (pooling/rerank.py); None: it cannot (no single "yes"
        and "no" tokens in its vocabulary, and no rank head)."""
        template = self.model.chat_template("rerank")
        if self.model.ranking is not None:
            return Reranker(RANK_HEAD, self.model.ranking.n_batch, template)
        yes, no = (self.model.tokenize(word, add_special=False, parse_special=False) for word in ("yes", "no"))
        if len(yes) != 1 or len(no) != 1:
            return None
        return Reranker(YES_NO, self.n_ctx_seq, template, (yes[0], no[0]))

    def rerank_tokens(self, reranker: Reranker, query: str, document: str) -> list[int]:
        """One document's prompt: the GGUF's rerank template filled in, llama-server's pair for a rank head, or
        the relevance question through the chat template. Reads only the vocab and the template: any thread."""
        if reranker.template is not None:
            return self.model.tokenize(filled(reranker.template, query, document), add_special=False)
        if reranker.route == RANK_HEAD:
            return self.model.pair_tokens(query, document)
        thinking = EMPTY_THINKING if self.chat.thinks else ""
        return self.chat_prompt(self.chat_text(relevance_messages(query, document)) + thinking).tokens

    async def rerank(self, reranker: Reranker, prompts: list[list[int]], request_id: str) -> list[float]:
        """Each prompt's relevance score (rerank_tokens' prompts, each within reranker.limit tokens).

        Raises loop.QueueFull up front, EmbeddingFailed when a score did not come."""
        if reranker.route == YES_NO:
            return await yes_no_scores(self.submit, prompts, reranker.yes_no, self.model.config.parallel, request_id)
        return [vector[0] for vector in await self._pooled(RANK, prompts)]

    def tokenize_inputs(self, inputs: list[str | list[int]]) -> list[list[int]]:
        """Embedding inputs: texts as llama-server tokenizes them (BOS and EOS as the vocab asks), token ids as sent."""
        return [self.model.tokenize(item, add_special=True) if isinstance(item, str) else item for item in inputs]

    async def embed(self, inputs: list[list[int]]) -> list[Vector]:
        """Each input's pooled, L2-normalized vector, decoded on the engine thread between generation steps.

        Raises UnfitInputs or loop.QueueFull up front, EmbeddingFailed when no vectors came.
        """
        if self.model.embedding is None:
            raise RuntimeError("this engine was loaded without embeddings")
        check_inputs(inputs, self.model.embedding.n_batch)
        return await self._pooled(EMBEDDINGS, inputs)

    async def _pooled(self, kind: str, inputs: list[list[int]]) -> list[Vector]:
        """Each input's output from the pooled context `kind` (embeddings.py), between generation steps."""
        future: asyncio.Future[list[Vector]] = self._loop.create_future()
        job = EmbeddingJob(inputs, partial(self._resolve, future))
        self._steps.add_pooled(kind, job)
        try:
            return await future
        except asyncio.CancelledError:
            job.cancelled = True  # the engine skips what it has not decoded yet
            raise

    def _resolve(self, future: asyncio.Future, outcome: Outcome) -> None:
        """Engine thread -> event loop, for a pooled job's outcome (generation events go by self._events)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(_settle, future, outcome)

    @staticmethod
    def _deliver(events: Events) -> None:
        for sequence, event in events:
            handle = sequence.handle
            assert handle is not None  # submit_choices gives each sequence its handle before it is queued
            handle.push(event)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the engine thread; every open request ends with a CANCELLED Finished."""
        self._steps.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():  # never free the context under a running decode
            self._events.close()
            if self.projector is not None:
                self.projector.close()
            self.model.close()


def _settle(future: asyncio.Future, outcome: Outcome) -> None:
    if future.done():  # the caller stopped waiting
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
