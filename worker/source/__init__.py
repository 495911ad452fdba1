"""Where weights come from: the models.toml registry, registry packages, local paths.

Names load on first use (worker.lazy), so the CLI's --help does not import the hub client.
"""

from typing import TYPE_CHECKING

from worker.lazy import exports

if TYPE_CHECKING:  # the same names, as type checkers see them (through __getattr__ they would be Any)
    from worker.source.registry import ModelEntry as ModelEntry
    from worker.source.registry import Registry as Registry
    from worker.source.registry import load_registry as load_registry
    from worker.source.resolve import ResolvedModel as ResolvedModel
    from worker.source.resolve import resolve_model as resolve_model

__getattr__ = exports(__name__, {
    "ModelEntry": "registry", "Registry": "registry", "load_registry": "registry",
    "ResolvedModel": "resolve", "resolve_model": "resolve",
})
