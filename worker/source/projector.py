"""Where a model's multimodal projector comes from (--mmproj, a models.toml entry's mmproj): a local GGUF file, or
hf:owner/repo[/file.gguf][@revision], fetched beside the model, before either loads."""

from __future__ import annotations

from pathlib import Path

from worker.source.hubref import HUB_PREFIX, parse_hub_ref
from worker.source.sources import PathSource, ProjectorSource


def projector_source(value: str, folder: Path | None = None) -> ProjectorSource:
    """A projector's name as a source; a relative path is read from `folder` (a models.toml's) when given."""
    if value.startswith(HUB_PREFIX):
        return parse_hub_ref(value)
    path = Path(value).expanduser()
    return PathSource(folder / path if folder else path)


def fetch_projector(source: ProjectorSource, model: Path) -> Path:
    """The projector as a local file; from the hub, the one `model` (the model's GGUF or folder) picks in its repo."""
    if isinstance(source, PathSource):
        return source.path
    from worker.source.hub import fetch_hub_projector  # huggingface_hub, only for a hub projector

    return fetch_hub_projector(source, model)
