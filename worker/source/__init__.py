"""Where weights come from: the models.toml registry, registry packages, local paths."""

from worker.source.registry import ModelEntry, Registry, load_registry
from worker.source.resolve import ResolvedModel, resolve_model

__all__ = ["ModelEntry", "Registry", "ResolvedModel", "load_registry", "resolve_model"]
