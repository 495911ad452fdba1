"""What startup says about exactness: the report (/health's `exactness`, the model_loaded line) built from the
kernels chosen and the load-time check's measurement, and why drafts are off or may change text."""

from __future__ import annotations

from worker.engine.engine import Engine
from worker.engine.exactness.build_choice import loaded_build
from worker.engine.modes import CacheMode, SpecType
from worker.engine.serving.facts import Exactness
from worker.engine.startup.load_check import Numerics


def exactness_report(engine: Engine, numerics: Numerics) -> Exactness:
    model = engine.model
    attention, kernels = model.attention, model.kernels
    speculator = engine.steps.speculator
    return Exactness(model.config.prefix_cache.value, loaded_build(), kernels.batch_invariant,
                     attention.flash_attn, attention.cache_type_k, attention.cache_type_v, attention.pinned,
                     attention.workaround,
                     kernels.tiled_mm, kernels.repack, numerics.decoded_cells_exact, numerics.batch_invariant,
                     numerics.moved_cells_exact,
                     # answers' cells reused: fast mode, or exact where the numerics allow (startup/load_check.py)
                     engine.cache.every_cell,
                     speculator.kind.value if speculator else SpecType.NONE.value,
                     drafts_keep_text(engine, numerics), model.memory_kind.cuts.value, model.memory_kind.rollback)


def drafts_keep_text(engine: Engine, numerics: Numerics) -> bool | None:
    """Whether drafts leave greedy text as it is without them; None: no drafts."""
    if not engine.drafting:
        return None
    return engine.model.config.prefix_cache is not CacheMode.FAST and numerics.drafts_keep_text


def drafts_reason(engine: Engine, numerics: Numerics) -> str:
    """Why drafts are off (--spec-type auto) or may change the text."""
    config = engine.model.config
    if config.draft_max == 0:
        return "--draft-max 0"
    if config.prefix_cache is CacheMode.FAST:
        return "fast mode lets llama.cpp pick kernels by batch shape, so a drafted row may compute differently"
    if not numerics.trusted:
        return (f"the load-time check is not trusted on the {config.backend} backend"
                f"{' with rpc' if config.rpc_servers else ''}: its kernels change with batch shape")
    return ("the load-time check found a sequence's rows decoded together unequal to one-token decodes, or a row "
            "changed by the rows beside it: greedy text with drafts may differ from text without")
