"""models.toml: named models, their sources and their per-model defaults."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.fields import MODEL_DEFAULTS
from worker.source.projector import projector_source
from worker.source.sources import HubSource, PackageSource, PathSource, ProjectorSource, Source
from worker.worker_error import WorkerError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SHIPPED_REGISTRY = Path(__file__).resolve().parent.parent / "models.toml"




def _hub_table(table: dict[str, Any], origin: Path) -> dict[str, Any]:
    sha256 = table.get("sha256", ())
    table["sha256"] = (sha256,) if isinstance(sha256, str) else tuple(sha256)
    return table


def _path_table(table: dict[str, Any], origin: Path) -> dict[str, Any]:
    raw = Path(table.pop("path")).expanduser()
    table["path"] = raw if raw.is_absolute() else origin.parent / raw
    return table


# kind -> (source type, how its TOML table becomes constructor arguments)
_SOURCE_KINDS: dict[str, tuple[type, Callable[[dict[str, Any], Path], dict[str, Any]]]] = {
    "package": (PackageSource, lambda table, origin: table),
    "path": (PathSource, _path_table),
    "hf": (HubSource, _hub_table),
}


@dataclass(frozen=True)
class ModelDefaults:
    """Per-model defaults from models.toml; explicit flags and request fields win over them."""

    ctx_size: int | None = None  # used when --ctx-size is not given
    chat_template: str | None = None  # a Jinja chat template used instead of the GGUF's own
    sampling: dict[str, float] = field(default_factory=dict)  # request field -> value, checked like a request's
    # Template variables under each request's chat_template_kwargs (e.g. enable_thinking = false).
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # The model's projector (images): a path (relative: from the models.toml's folder) or an hf: name.
    mmproj: ProjectorSource | None = None


@dataclass(frozen=True)
class ModelEntry:
    name: str
    source: Source
    description: str = ""
    defaults: ModelDefaults = ModelDefaults()


@dataclass(frozen=True)
class Registry:
    default: str
    entries: dict[str, ModelEntry]

    def get(self, name: str) -> ModelEntry | None:
        return self.entries.get(name)


def _parse_source(name: str, table: dict[str, Any], origin: Path) -> Source:
    table = dict(table)
    kind = table.pop("kind", None)
    if kind not in _SOURCE_KINDS:
        raise WorkerError(
            f"{origin}: model {name!r} has source kind {kind!r}; "
            f"use one of: {', '.join(_SOURCE_KINDS)}"
        )
    source_type, arguments = _SOURCE_KINDS[kind]
    try:
        return source_type(**arguments(table, origin))
    except (TypeError, KeyError) as exc:
        raise WorkerError(f"{origin}: model {name!r} has a bad source table: {exc}") from None


def _parse_defaults(name: str, table: dict[str, Any], origin: Path) -> ModelDefaults:
    where = f"{origin}: model {name!r}"
    unknown = set(table) - {"ctx_size", "chat_template", "chat_template_kwargs", "sampling", "mmproj"}
    if unknown:
        raise WorkerError(f"{where} has unknown keys {sorted(unknown)}; besides source and description an entry "
                          "takes ctx_size, chat_template, chat_template_kwargs, sampling, mmproj")
    ctx_size = table.get("ctx_size")
    if ctx_size is not None and (not isinstance(ctx_size, int) or isinstance(ctx_size, bool) or ctx_size < 0):
        raise WorkerError(f"{where}: ctx_size must be a whole number >= 0, not {ctx_size!r}")
    template = table.get("chat_template")
    if template is not None and not (isinstance(template, str) and template.strip()):
        raise WorkerError(f"{where}: chat_template must be a non-empty Jinja template string")
    sampling = table.get("sampling", {})
    if not isinstance(sampling, dict) or set(sampling) - set(MODEL_DEFAULTS):
        raise WorkerError(f"{where}: sampling must be a table of {', '.join(MODEL_DEFAULTS)}")
    template_kwargs = table.get("chat_template_kwargs", {})
    if not isinstance(template_kwargs, dict):
        raise WorkerError(f"{where}: chat_template_kwargs must be a table of template variables")
    mmproj = table.get("mmproj")
    if mmproj is not None and not (isinstance(mmproj, str) and mmproj):
        raise WorkerError(f"{where}: mmproj must be the path of a projector GGUF (mmproj-*.gguf), "
                          "hf:owner/repo or hf:owner/repo/file.gguf")
    try:
        projector = projector_source(mmproj, origin.parent) if mmproj else None
    except WorkerError as exc:
        raise WorkerError(f"{where}: mmproj {exc}") from None
    return ModelDefaults(ctx_size, template, dict(sampling), dict(template_kwargs), projector)


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
        entries[name] = ModelEntry(name, source, description, _parse_defaults(name, table, path))
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
