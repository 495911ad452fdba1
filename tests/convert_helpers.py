"""Shared by the conversion tests: the oracle (cached) and its `hf` fixture, GGUF comparison, small HTTP calls."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.make_hf_folder import VERSION, Fixture, build
from tests.gguf_files import read_gguf
from worker.user_cache import cache_dir


def oracle(model_path: Path) -> Fixture:
    """The Hugging Face folders and llama.cpp references, made once per test model (keyed by its sha256)."""
    sha = model_path.parent.name  # blobs/<sha256>/<file>
    return build(model_path, cache_dir() / "test-fixtures" / f"hf-{sha[:16]}-v{VERSION}")


@pytest.fixture(scope="module")
def hf(model_path: Path):
    return oracle(model_path)


def tensors(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Every tensor of a GGUF: (type, shape, bytes)."""
    return {t.name: (t.tensor_type.name, tuple(t.shape.tolist()), t.data.tobytes()) for t in read_gguf(path).tensors}


def mismatches(a: Path, b: Path) -> list[str]:
    ta, tb = tensors(a), tensors(b)
    assert set(ta) == set(tb), set(ta) ^ set(tb)
    return [name for name in ta if ta[name] != tb[name]]


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def cache_files(cache: Path) -> list[Path]:
    """GGUF and temp files in the conversion cache (the lock folder aside)."""
    folder = cache / "converted"
    return [p for p in folder.iterdir() if p.name != ".locks"] if folder.is_dir() else []
