"""Imports that load no more than they must: package namespaces whose names load on first use (PEP 562), and single
pure-Python modules of other packages, loaded without their package's __init__.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module __getattr__ for `package`: names maps each exported name to the submodule that defines it.

    `llm-worker --help` imports the CLI, which names its choices from worker.source: a package __init__ that imported
    every submodule would load numpy, gguf and huggingface_hub for it."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{names[name]}"), name)

    return __getattr__


def standalone_module(package: str, name: str) -> ModuleType:
    """`package.name`, a module that imports only the standard library, loaded from its file without running
    `package`'s __init__: llama_cpp's loads libllama (the worker chooses which build first,
    engine/exactness/build_choice.py),
    gguf's loads numpy and PyYAML (~12 MB of RSS a worker serving a local GGUF never needs)."""
    qualified = f"{__name__}.{package}.{name}"
    if qualified not in sys.modules:
        found = importlib.util.find_spec(package)  # a top-level package is found without being imported
        assert found is not None and found.submodule_search_locations, f"{package} is not installed"
        source = Path(found.submodule_search_locations[0]) / f"{name}.py"
        spec = importlib.util.spec_from_file_location(qualified, source)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module  # before running it: dataclasses and enums look their module up
        spec.loader.exec_module(module)
    return sys.modules[qualified]
