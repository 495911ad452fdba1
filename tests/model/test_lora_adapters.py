"""An adapter made for another base model is refused at load, in one line that names the adapter, what it was made
for, and the model: adapters written with gguf-py for another architecture and for another model's shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.adapters import write_adapter
from worker.engine.config import EngineConfig, Lora
from worker.worker_error import WorkerError


def attention_adapter(out: Path, arch: str, width: int, base_name: str) -> Path:
    """A rank-8 update of blk.0.attn_q for a model `width` wide (the test model: 576)."""
    a, b = np.full((8, width), 0.01, np.float32), np.full((width, 8), 0.01, np.float32)
    return write_adapter(out, arch, {"blk.0.attn_q.weight": (a, b)}, "other", base_name)


@pytest.mark.parametrize("arch,width,why", [
    ("qwen2", 576, "model arch and LoRA arch mismatch"),
    ("llama", 960, "tensor 'blk.0.attn_q.weight' has incorrect shape"),
])
def test_an_adapter_for_another_base_is_refused_naming_both(model_path, tmp_path, arch, width, why):
    from worker.engine.native.model import LlamaModel

    adapter = attention_adapter(tmp_path / "other.gguf", arch, width, "SmolLM2-360M-Instruct")
    with pytest.raises(WorkerError) as refused:
        LlamaModel(model_path, EngineConfig(ctx_size=256, parallel=1, lora=(Lora(adapter, "other"),)))
    message = str(refused.value)
    assert "\n" not in message and why in message
    assert f"--lora {adapter} ({arch}, SmolLM2-360M-Instruct" in message and str(model_path) in message


def test_a_file_that_is_no_adapter_is_refused(model_path, tmp_path):
    from worker.engine.native.model import LlamaModel

    with pytest.raises(WorkerError, match=r"expect general\.type to be 'adapter'"):
        LlamaModel(model_path, EngineConfig(ctx_size=256, parallel=1, lora=(Lora(model_path, "itself"),)))
    with pytest.raises(WorkerError, match="no such file"):
        LlamaModel(model_path, EngineConfig(ctx_size=256, parallel=1, lora=(Lora(tmp_path / "x.gguf", "x"),)))
