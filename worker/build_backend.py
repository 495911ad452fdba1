"""`llm-worker build-backend`: recompile llama-cpp-python for CMakePresets.json variants."""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass

import structlog

from worker.build_presets import Variant
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)

PACKAGE = "llama-cpp-python"


@dataclass(frozen=True)
class PipBuild:
    argv: tuple[str, ...]
    cmake_args: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CMAKE_ARGS": self.cmake_args}

    def shell(self) -> str:
        return f"CMAKE_ARGS={shlex.quote(self.cmake_args)} {shlex.join(self.argv)}"


def pinned_requirement() -> str:
    """llm-worker's own pin: the engine is written against that llama-cpp-python's C API."""
    try:
        requires = importlib.metadata.requires("llm-worker") or []
    except importlib.metadata.PackageNotFoundError:
        raise WorkerError("llm-worker is not installed in this Python; pip install it first") from None
    for requirement in requires:
        if requirement.replace(" ", "").startswith(f"{PACKAGE}=="):
            return requirement.split(";")[0].replace(" ", "")
    raise WorkerError(f"llm-worker's metadata names no exact {PACKAGE} version; reinstall llm-worker")


def pip_build(variant: Variant, python: str = sys.executable, extra_cmake_args: str = "") -> PipBuild:
    # $CMAKE_ARGS goes last so it wins over the preset, as it would with a plain pip install.
    cmake_args = " ".join([*variant.cmake_args(), *([extra_cmake_args] if extra_cmake_args else [])])
    argv = (
        python, "-m", "pip", "install", "--verbose",  # --verbose: the compiler's progress, minutes of it
        # pip caches a wheel it built under its plain name and version, whatever CMAKE_ARGS built
        # it, and reuses it even with --no-binary: --no-cache-dir forces a compile with these flags,
        # --force-reinstall replaces the same version already installed.
        "--no-cache-dir", "--force-reinstall", "--no-deps", "--no-binary", PACKAGE,
        pinned_requirement(),
    )
    return PipBuild(argv=argv, cmake_args=cmake_args)


def build(variant: Variant, extra_cmake_args: str = "") -> None:
    """Compile and install into this Python's environment, then show what the new build has."""
    pip = pip_build(variant, extra_cmake_args=extra_cmake_args)
    log.info("build_backend_started", presets=",".join(variant.names), cmake_args=pip.cmake_args,
             note="compiles llama.cpp: minutes (CUDA: tens of minutes)")
    done = subprocess.run(pip.argv, env=pip.env)
    if done.returncode != 0:
        needs = f" (on Debian/Ubuntu it needs: {' '.join(variant.apt_build)})" if variant.apt_build else ""
        raise WorkerError(
            f"building {PACKAGE} for {' '.join(variant.names)} failed (pip exit {done.returncode}); "
            f"the compiler output above says why{needs}"
        )
    log.info("build_backend_done", presets=",".join(variant.names))
    # A fresh process: this one may already have loaded the old libraries.
    subprocess.run([sys.executable, "-m", "worker", "backends"], check=False)
