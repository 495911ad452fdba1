"""A Hugging Face model folder: config.json, generation_config.json, tokenizer files, SafeTensors weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.source.convert.generation import GENERATION_CONFIG, read_generation_config
from worker.source.convert.safetensors import INDEX_FILE, TensorInfo, file_signature, read_header, weight_files
from worker.worker_error import WorkerError

CONFIG_FILE = "config.json"
# Files that decide the GGUF's vocabulary and metadata: all of them go into the cache key.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json")


def is_hf_folder(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG_FILE).is_file()


@dataclass(frozen=True)
class HfFolder:
    path: Path
    config: dict[str, Any]  # config.json, with a multimodal model's text_config merged in at the top
    tensors: dict[str, TensorInfo]  # every tensor of every weights file, by Hugging Face name
    generation: dict[str, Any]  # generation_config.json ({} without one): the sampling its makers meant

    @property
    def architecture(self) -> str:
        names = self.config.get("architectures") or [self.config.get("model_type", "?")]
        return names[0]


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WorkerError(f"cannot read {path / CONFIG_FILE}: {exc}") from None
    # Multimodal checkpoints (e.g. Gemma 3 4B+) keep the language model's settings in text_config.
    return {**config, **config.get("text_config", {})}


def open_folder(path: Path) -> HfFolder:
    config = _read_config(path)
    tensors: dict[str, TensorInfo] = {}
    for file in weight_files(path):
        tensors.update(read_header(file)[1])
    return HfFolder(path, config, tensors, read_generation_config(path))


def input_signature(path: Path) -> list[tuple[str, bytes]]:
    """Everything a conversion reads, cheaply: config, generation config and tokenizer files whole, weights by header
    and size."""
    parts = [(name, (path / name).read_bytes()) for name in (CONFIG_FILE, GENERATION_CONFIG, INDEX_FILE,
                                                            *TOKENIZER_FILES)
             if (path / name).is_file()]
    parts += [(file.name, file_signature(file)) for file in weight_files(path)]
    return parts
