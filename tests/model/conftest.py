"""What several model tests share: the test model's vocabulary, loaded alone (no weights)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest


@pytest.fixture(scope="module")
def vocab(model_path: Path) -> Iterator[llama_cpp.llama_vocab_p]:
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), params)
    assert model
    yield llama_cpp.llama_model_get_vocab(model)
    llama_cpp.llama_model_free(model)
