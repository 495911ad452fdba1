"""A folder's generation_config.json, its sampling settings written as the GGUF's general.sampling.* keys as llama.cpp's
converter writes them (gguf-py's Metadata.load and set_gguf_meta_model): the GGUF then samples as the model's makers
meant, here (api/model_sampling.py reads the keys back) and in llama.cpp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worker.worker_error import WorkerError

GENERATION_CONFIG = "generation_config.json"

# gguf-py's writer call for each key, and the generation_config.json keys it is read from (the first one set wins),
# in the order llama.cpp's converter writes them.
SAMPLING_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("add_sampling_sequence", ("sequence",)),
    ("add_sampling_top_k", ("top_k",)),
    ("add_sampling_top_p", ("top_p",)),
    ("add_sampling_min_p", ("min_p",)),
    ("add_sampling_xtc_probability", ("xtc_probability",)),
    ("add_sampling_xtc_threshold", ("xtc_threshold",)),
    ("add_sampling_temp", ("temperature",)),
    ("add_sampling_penalty_last_n", ("penalty_last_n",)),
    ("add_sampling_penalty_repeat", ("penalty_repeat", "repetition_penalty")),  # Hugging Face's name second
    ("add_sampling_mirostat", ("mirostat",)),
    ("add_sampling_mirostat_tau", ("mirostat_tau",)),
    ("add_sampling_mirostat_eta", ("mirostat_eta",)),
)


def read_generation_config(folder: Path) -> dict[str, Any]:
    """The folder's generation_config.json ({} without one). One that cannot be read is an error: llama.cpp's
    converter would go on without its settings, and the model would sample otherwise than meant."""
    path = folder / GENERATION_CONFIG
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorkerError(f"cannot read {path}: {exc}; fix it, or remove it to convert without its sampling "
                          "settings") from None
    if not isinstance(config, dict):
        raise WorkerError(f"{path} is not a JSON object; fix it, or remove it to convert without its sampling settings")
    return config


def sampling_keys(config: dict[str, Any]) -> list[tuple[str, Any]]:
    """(gguf-py writer call, value) for each sampling setting `config` has."""
    found = []
    for method, names in SAMPLING_KEYS:
        value = next((config[name] for name in names if config.get(name) is not None), None)
        if value is not None:
            found.append((method, value))
    return found
