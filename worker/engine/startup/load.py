"""Loading a model to serve: the GGUF and its context, the projector, the engine thread warmed up and the load-time
check run on it, --kv-dir's cells read back, and what holds for greedy text said once in the log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import structlog

from worker.engine.config import EngineConfig
from worker.engine.core.loop import EngineLoop
from worker.engine.engine import Engine
from worker.engine.kv.host_cache import MIB
from worker.engine.modes import CacheMode, SpecType
from worker.engine.native.model import LlamaModel
from worker.engine.native.projector import Projector
from worker.engine.serving.facts import ModelFacts
from worker.engine.serving.input_processor import InputProcessor
from worker.engine.serving.pooled_outputs import PooledOutputs
from worker.engine.serving.prompts import Prompts
from worker.engine.serving.saved_cells import MOVED_CELLS_INEXACT, SavedCells
from worker.engine.serving.served_model import ServedModel
from worker.engine.startup.check_record import check_key, record_passes, recorded_or, recorded_passes
from worker.engine.startup.guarantee import guarantee
from worker.engine.startup.load_check import Numerics, measure
from worker.engine.startup.report import drafts_reason, exactness_report
from worker.progress_callback import ProgressFn

log = structlog.get_logger(__name__)


def load_model(path: Path, config: EngineConfig, loop: asyncio.AbstractEventLoop,
               progress: ProgressFn | None = None, chat_template: str | None = None,
               template_kwargs: dict[str, Any] | None = None) -> ServedModel:
    """Blocking: load the GGUF, create the context, start the engine thread, warm it up.

    Events are delivered on `loop`; `progress` hears the load and warmup stages;
    `chat_template` replaces the GGUF's own and `template_kwargs` sets its variables (models.toml).
    """
    model = LlamaModel(path, config, progress)
    projector = None
    try:
        projector = Projector(config.mmproj, model) if config.mmproj else None
        prompts = Prompts(model, projector, chat_template, template_kwargs, config.reasoning_format)
        engine = Engine(model, loop, projector)
        pooled = PooledOutputs(engine, prompts)
    except BaseException:  # a draft model that cannot draft for it, or a projector made for another model
        if projector is not None:
            projector.close()
        model.close()
        raise
    if progress is not None:
        progress("warmup", 0, 1)
    numerics = engine.start(lambda: _warm_up(model, engine.steps))
    if progress is not None:
        progress("warmup", 1, 1)
    cells = SavedCells(engine)
    if config.kv_dir is not None:
        cells.open_kv_dir(config.kv_dir, config.kv_dir_mib * MIB)
    facts = ModelFacts(model.n_ctx_seq, model.n_vocab, config.parallel, model.size_bytes, model.device_bytes,
                       config.lora, exactness_report(engine, numerics), path, model.n_params, model.metadata(),
                       config.micro_batch)
    served = ServedModel(engine, prompts, pooled, cells, facts, InputProcessor(prompts, facts))
    _say_loaded(served, numerics, path, chat_template)
    return served


def _warm_up(model: LlamaModel, steps: EngineLoop) -> Numerics:
    """On the engine thread, before any request: the first decode, the draft passes timed, and in exact mode the
    load-time check, whose measurement decides what the cache may reuse and whether drafts stay on (a restart with
    the same model, flags and build reuses the last start's passes and check: startup/check_record.py)."""
    model.warm_up()
    key = check_key(model)
    if steps.speculator:
        steps.measure_passes(recorded_passes(key), lambda timed: record_passes(key, timed))
    config = model.config
    mode = config.prefix_cache
    numerics = Numerics(None, None)  # measured in exact mode only
    if mode is CacheMode.EXACT or (steps.speculator and mode is CacheMode.OFF):
        numerics = recorded_or(key, lambda: measure(model))
        if numerics.answers_reusable:
            steps.cache.trust_decoded_cells()
        if numerics.moved_cells_exact is False:
            steps.cache.distrust_moved_cells()
    if config.spec_type is SpecType.AUTO and steps.speculator and not numerics.drafts_keep_text:
        steps.stop_drafting()  # _say_loaded says why
    model.clear_cells()  # what the check and the timings wrote: no request reuses it
    return numerics


def _say_loaded(served: ServedModel, numerics: Numerics, path: Path, chat_template: str | None) -> None:
    """The model_loaded line, and once each what holds for greedy text where less than the full promise does."""
    engine, facts = served.engine, served.facts
    model, config = engine.model, engine.model.config
    stats = served.stats()
    restored = {"kv_restored_entries": stats.disk.restored_entries,
                "kv_restored_tokens": stats.disk.restored_tokens} if stats.disk else {}
    reranker = served.pooled.reranker
    log.info("model_loaded", path=str(path), n_ctx=model.n_ctx, n_ctx_seq=model.n_ctx_seq,
             slots=config.parallel, size_bytes=model.size_bytes, backend=config.backend,
             chat_template="models.toml" if chat_template else "gguf",
             mmproj=str(config.mmproj) if config.mmproj else None, input_modalities=served.prompts.input_modalities,
             **facts.exactness.as_dict(),
             embeddings_pooling=model.pooling,
             embeddings_max_tokens=model.embedding.n_batch if model.embedding else 0,
             rerank=reranker.route if reranker else None, lora=[lora.name for lora in config.lora],
             cache_ram_limit_bytes=stats.cache_ram_limit_bytes, **restored)
    # Said on every backend, as a warning where less than the full promise holds in exact or off mode.
    promise = guarantee(config.prefix_cache, numerics, config.backend, bool(config.rpc_servers))
    quiet = promise.full or config.prefix_cache is CacheMode.FAST
    (log.info if quiet else log.warning)("exactness_guarantee", guarantee=promise.name, holds=promise.holds)
    if facts.exactness.attention_workaround:
        log.warning("attention_workaround", reason=facts.exactness.attention_workaround,
                    fix="flash attention needs another Vulkan device")
    if numerics.batch_invariant is False:
        log.warning("exactness_limited", reason="a row's logits changed with the rows beside it in the load-time "
                    "check: greedy text may depend on what runs beside a request; the prefix cache still reuses "
                    "only whole prefilled blocks", fix="serve with --parallel 1, or a weight type and backend "
                    "docs/cache-and-exactness.md lists as exact")
    if numerics.moved_cells_exact is False and config.prefix_cache is CacheMode.EXACT:
        log.warning("exactness_limited", reason=f"{MOVED_CELLS_INEXACT}: exact mode reuses a slot's own cells "
                    "only, and copies none between slots, loads none back from host memory, --kv-dir or a slot "
                    "file", fix="a weight type and backend docs/cache-and-exactness.md lists as exact")
    if config.drafting is not SpecType.NONE and not engine.drafting:
        asked = config.spec_type is not SpecType.AUTO  # drafts asked for by name, and not had: a warning
        (log.warning if asked else log.info)("drafts_off", reason=drafts_reason(engine, numerics),
                                             spec_type=config.spec_type.value)
    if facts.exactness.drafts_keep_text is False:
        log.warning("drafts_may_change_text", reason=drafts_reason(engine, numerics),
                    fix="serve in exact mode on the cpu backend, or with --spec-type none")
