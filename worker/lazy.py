"""Package namespaces whose names are imported on first use (PEP 562).

`llm-worker --help` imports the CLI, which names its choices from worker.source; a package
__init__ that imported every submodule would load numpy, gguf and huggingface_hub for it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module __getattr__ for `package`: names maps each exported name to the submodule that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{names[name]}"), name)

    return __getattr__
