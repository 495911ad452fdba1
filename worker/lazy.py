"""Imports that load no more than they must: package namespaces whose names load on first use (PEP 562), single
pure-Python modules of other packages loaded without their package's __init__, and another package with only part
of what its __init__ loads.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
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


def package_without_init(package: str, module: str) -> ModuleType:
    """`package` with `package.module`'s names (what its __init__'s `from .module import *` gives), without running the
    rest of its __init__ until a name only that defines is asked for (PEP 562).

    llama_cpp's __init__ also imports its high-level Llama class, and with it jinja2, diskcache (sqlite3) and its
    chat formats: 4-5 MB of RSS a worker, which calls llama.cpp's C API through llama_cpp.llama_cpp, never uses
    (bench/probes/RESULTS.md, "Memory beside the model")."""
    if package in sys.modules:
        return sys.modules[package]
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.loader is not None and spec.origin is not None, f"{package} is not installed"
    namespace = importlib.util.module_from_spec(spec)  # __path__ set: its submodules import as ever
    sys.modules[package] = namespace
    try:
        inner = importlib.import_module(f"{package}.{module}")
    except BaseException:
        del sys.modules[package]
        raise
    names = getattr(inner, "__all__", [name for name in vars(inner) if not name.startswith("_")])
    vars(namespace).update({name: getattr(inner, name) for name in names})
    # The __init__'s __version__, read from its text: asking for it must not load what this module leaves out.
    if version := re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", Path(spec.origin).read_text(), re.M):
        vars(namespace)["__version__"] = version.group(1)
    loader = spec.loader

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # a tool's probe (__wrapped__, ...): nothing the __init__ would define
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if importlib.util.find_spec(f"{package}.{name}") is not None:  # `from package import submodule` asks first
            return importlib.import_module(f"{package}.{name}")
        del vars(namespace)["__getattr__"]
        loader.exec_module(namespace)  # the whole __init__, once
        return getattr(namespace, name)

    vars(namespace)["__getattr__"] = __getattr__
    return namespace
