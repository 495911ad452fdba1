"""`llm-worker build-backend`: compile llama.cpp for CMakePresets.json variants, into this Python's llama-cpp-python.

From a checkout (make install's editable install) it runs the script make install runs, scripts/install-llama-cpp-libs,
with our patches: one compile, cached per flags and patches, whose libraries replace llama_cpp/lib. Installed from a
wheel, which carries no scripts, it has pip compile llama-cpp-python again with the presets' flags."""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from worker.build_presets import Variant
from worker.worker_error import WorkerError

log = structlog.get_logger(__name__)

PACKAGE = "llama-cpp-python"
CHECKOUT = Path(__file__).resolve().parent.parent
SCRIPT = CHECKOUT / "scripts" / "install-llama-cpp-libs"
PATCHES = CHECKOUT / "patches" / "llama.cpp"


@dataclass(frozen=True)
class BuildCommand:
    argv: tuple[str, ...]
    env_changes: dict[str, str] = field(default_factory=dict)
    cmake_args: str = ""  # the flags it compiles with, for the log

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, **self.env_changes}

    def shell(self) -> str:
        assignments = [f"{key}={shlex.quote(value)}" for key, value in self.env_changes.items()]
        return " ".join([*assignments, shlex.join(self.argv)])


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


def _flags(variant: Variant, extra_cmake_args: str) -> str:
    # $CMAKE_ARGS goes last so it wins over the preset, as it would with a plain pip install.
    return " ".join([*variant.cmake_args(), *([extra_cmake_args] if extra_cmake_args else [])])


def script_build(variant: Variant, venv: str = sys.prefix, extra_cmake_args: str = "") -> BuildCommand:
    """The checkout's script, as make install runs it (scripts/build-llama-cpp reads the presets and $CMAKE_ARGS)."""
    env = {"LLAMA_CPP_PATCHES": str(PATCHES), **({"CMAKE_ARGS": extra_cmake_args} if extra_cmake_args else {})}
    return BuildCommand(argv=(str(SCRIPT), ",".join(variant.names), venv), env_changes=env,
                        cmake_args=_flags(variant, extra_cmake_args))


def pip_build(variant: Variant, python: str = sys.executable, extra_cmake_args: str = "") -> BuildCommand:
    cmake_args = _flags(variant, extra_cmake_args)
    argv = (
        python, "-m", "pip", "install", "--verbose",  # --verbose: the compiler's progress, minutes of it
        # pip caches a wheel it built under its plain name and version, whatever CMAKE_ARGS built
        # it, and reuses it even with --no-binary: --no-cache-dir forces a compile with these flags,
        # --force-reinstall replaces the same version already installed.
        "--no-cache-dir", "--force-reinstall", "--no-deps", "--no-binary", PACKAGE,
        pinned_requirement(),
    )
    return BuildCommand(argv=argv, env_changes={"CMAKE_ARGS": cmake_args}, cmake_args=cmake_args)


def build_command(variant: Variant, extra_cmake_args: str = "") -> BuildCommand:
    """The checkout's script where there is one, else pip."""
    if SCRIPT.is_file() and PATCHES.is_dir():
        return script_build(variant, extra_cmake_args=extra_cmake_args)
    return pip_build(variant, extra_cmake_args=extra_cmake_args)


def build(variant: Variant, extra_cmake_args: str = "") -> None:
    """Compile and install into this Python's environment, then show what the new build has."""
    command = build_command(variant, extra_cmake_args)
    log.info("build_backend_started", presets=",".join(variant.names), cmake_args=command.cmake_args,
             command=command.shell(), note="compiles llama.cpp: minutes (CUDA: tens of minutes)")
    done = subprocess.run(command.argv, env=command.env)
    if done.returncode != 0:
        needs = f" (on Debian/Ubuntu it needs: {' '.join(variant.apt_build)})" if variant.apt_build else ""
        raise WorkerError(
            f"building llama.cpp for {' '.join(variant.names)} failed ({Path(command.argv[0]).name} exit "
            f"{done.returncode}); the compiler output above says why{needs}"
        )
    log.info("build_backend_done", presets=",".join(variant.names))
    # A fresh process: this one may already have loaded the old libraries.
    subprocess.run([sys.executable, "-m", "worker", "backends"], check=False)
