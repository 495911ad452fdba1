"""The load-time check's record (worker/engine/startup/check_record.py): a start reuses an answer only where
nothing it depends on changed, and a record it cannot read is measured again, never trusted."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from worker.engine.config import EngineConfig, Lora
from worker.engine.startup.check_record import (
    RECORDS_ENV,
    check_key,
    key_of,
    record,
    record_passes,
    recorded,
    recorded_or,
    recorded_passes,
)
from worker.engine.startup.load_check import Numerics

MEASURED = Numerics(True, False, trusted=True, verify_rows_exact=None, moved_cells_exact=True)
NUMERICS = {"libraries_sha256": "b" * 64, "ggml_env": "GGML_CPU_BATCH_INVARIANT=1", "threads": "2"}


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "records"))
    (tmp_path / "adapter.gguf").write_bytes(b"GGUF adapter")
    (tmp_path / "model.gguf").write_bytes(b"GGUF model")
    return tmp_path / "model.gguf"


def test_a_record_is_found_by_the_same_start_only(model):
    config = EngineConfig(parallel=2, threads=2)
    key = key_of(config, [model], NUMERICS)
    assert recorded(key) is None
    assert recorded_or(key, lambda: MEASURED) == MEASURED
    assert recorded_or(key_of(config, [model], dict(NUMERICS)), lambda: pytest.fail("measured again")) == MEASURED
    changed = {
        "a flag": key_of(EngineConfig(parallel=2, threads=1), [model], NUMERICS),
        "an adapter": key_of(EngineConfig(parallel=2, threads=2, lora=(Lora(model.with_name("adapter.gguf"), "a"),)),
                             [model], NUMERICS),
        "a ggml switch": key_of(config, [model], {**NUMERICS, "ggml_env": ""}),
        "a library": key_of(config, [model], {**NUMERICS, "libraries_sha256": "c" * 64}),
    }
    os.utime(model, ns=(1, 1))
    changed["the model file rewritten"] = key_of(config, [model], NUMERICS)
    assert all(recorded(other) is None for other in changed.values()), changed
    assert len({key, *changed.values()}) == len(changed) + 1


def test_flags_that_reach_neither_the_check_nor_its_context_share_its_record(model):
    """The queue, the stores of cells, the reasoning split, the pooled contexts and --draft-min change no logits the
    check compares, nor --spec-type ngram where auto drafts by prompt lookup too; what the context is made with does."""
    config = EngineConfig(parallel=2, threads=2, spec_type="auto")  # exact mode: prompt lookup on the cpu backend
    key = key_of(config, [model], NUMERICS)
    served = replace(config, spec_type="ngram", max_queue=3, cache_ram=0, kv_dir=model.parent, kv_dir_mib=1,
                     reasoning_format="none", embeddings=True, pooling="cls", draft_min=2)
    assert key_of(served, [model], NUMERICS) == key
    checked = {"no drafts": replace(config, spec_type="none"), "drafts of a model": replace(config, spec_type="draft"),
               "longer drafts": replace(config, draft_max=4), "another context": replace(config, ctx_size=1024),
               "another micro-batch": replace(config, ubatch_size=128),
               "fast mode": replace(config, prefix_cache="fast")}
    assert all(key_of(other, [model], NUMERICS) != key for other in checked.values())


@pytest.mark.parametrize("content", ['{"decoded_cells_exact": tru', '{"decoded_cells_exact": true}', "[]"])
def test_a_record_cut_short_or_of_another_shape_is_measured_again(model, content):
    key = _written(model, ".json", content)
    assert recorded(key) is None
    assert recorded_or(key, lambda: MEASURED) == MEASURED and recorded(key) == MEASURED


def test_no_record_without_a_key_and_none_where_the_folder_cannot_be_written(model, tmp_path, monkeypatch):
    record(None, MEASURED)
    assert recorded(None) is None and not Path(os.environ[RECORDS_ENV]).exists()
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "a-file" / "records"))  # under a file: cannot be made
    key = key_of(EngineConfig(), [model], NUMERICS)
    assert recorded_or(key, lambda: MEASURED) == MEASURED and recorded(key) is None


def test_the_draft_passes_costs_are_kept_beside_the_answer_for_the_same_start(model):
    """What a start timed comes back for a start with the same key only, as it was timed, and apart from the
    check's answer (a start may time passes and run no check: fast mode with --spec-type ngram)."""
    seconds = {1: 0.0147, 2: 0.024, 16: 0.1054}
    key = key_of(EngineConfig(parallel=2), [model], NUMERICS)
    assert recorded_passes(key) is None
    record_passes(key, seconds)
    assert recorded_passes(key) == seconds and recorded(key) is None
    record(key, MEASURED)
    assert recorded(key) == MEASURED and recorded_passes(key) == seconds
    assert recorded_passes(key_of(EngineConfig(parallel=3), [model], NUMERICS)) is None
    record_passes(None, seconds)
    assert recorded_passes(None) is None


@pytest.mark.parametrize("content", ['{"seconds": {"1": 0.01', '{"seconds": {}}', '{"seconds": {"1": 0}}',
                                     '{"seconds": [0.01]}', '{"ms": {"1": 10}}', "[]", '{"seconds": {"one": 0.1}}'])
def test_passes_cut_short_of_another_shape_or_of_no_time_are_timed_again(model, content):
    assert recorded_passes(_written(model, ".passes.json", content)) is None


def _written(model: Path, ending: str, content: str) -> str:
    """The key of a default start on `model`, whose record ending in `ending` holds `content`."""
    key = key_of(EngineConfig(), [model], NUMERICS)
    folder = Path(os.environ[RECORDS_ENV])
    folder.mkdir()
    (folder / f"{key}{ending}").write_text(content)
    return key


@pytest.mark.parametrize("config", [EngineConfig(backend="cuda"), EngineConfig(rpc_servers=("10.0.0.2:50052",))])
def test_no_key_off_the_cpu_backend_alone(config):
    """A GPU's or rpc server's kernels depend on a device the fingerprint does not name: measured at every start."""
    assert check_key(SimpleNamespace(config=config)) is None  # type: ignore[arg-type]
