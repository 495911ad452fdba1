"""Where weights come from: the models.toml registry, registry packages, local paths.

Names load on first use (worker.lazy), so the CLI's --help does not import the hub client.
"""

from worker.lazy import exports

__getattr__ = exports(__name__, {
    "ModelEntry": "registry", "Registry": "registry", "load_registry": "registry",
    "ResolvedModel": "resolve", "resolve_model": "resolve",
})
