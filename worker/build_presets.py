"""llama.cpp build variants, read from CMakePresets.json: the one place their CMake flags live.
Everything that compiles llama.cpp asks this module for them (docs/backends.md, "Builds"); it uses the standard library
only, so a fresh builder (no llama-cpp-python yet) can run it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from worker.worker_error import WorkerError

# worker/CMakePresets.json links to the repository's top-level file, so it ships in the package too.
PRESETS_FILE = Path(__file__).with_name("CMakePresets.json")
VENDOR_KEY = "llm-worker"  # our section of each preset's "vendor" object (CMake ignores it)


@dataclass(frozen=True)
class Variant:
    """One preset, or several combined: its cache variables and the Debian packages around it."""

    names: tuple[str, ...]
    description: str = ""
    cache_variables: dict[str, str] = field(default_factory=dict)
    apt_build: tuple[str, ...] = ()  # to compile it
    apt_run: tuple[str, ...] = ()  # to load the libraries it builds

    def cmake_args(self) -> list[str]:
        return [f"-D{key}={value}" for key, value in self.cache_variables.items()]


def _raw_presets(path: Path) -> dict[str, dict]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise WorkerError(f"{path} not found; run from a checkout of llm-worker or reinstall it") from None
    except json.JSONDecodeError as exc:
        raise WorkerError(f"{path} is not valid JSON: {exc}") from None
    return {preset["name"]: preset for preset in document.get("configurePresets", [])}


def _resolve(name: str, raw: dict[str, dict]) -> Variant:
    """CMake's inheritance: a preset's own values win, then its parents' in the order listed."""
    preset = raw[name]
    parents = preset.get("inherits", [])
    variables: dict[str, str] = {}
    apt_build: list[str] = []
    apt_run: list[str] = []
    for parent in reversed([parents] if isinstance(parents, str) else parents):
        resolved = _resolve(parent, raw)
        variables.update(resolved.cache_variables)
        apt_build += resolved.apt_build
        apt_run += resolved.apt_run
    variables.update({key: str(value) for key, value in preset.get("cacheVariables", {}).items()})
    ours = preset.get("vendor", {}).get(VENDOR_KEY, {})
    return Variant(
        names=(name,),
        description=preset.get("description", ""),
        cache_variables=variables,
        apt_build=tuple(dict.fromkeys(apt_build + ours.get("apt-build", []))),
        apt_run=tuple(dict.fromkeys(apt_run + ours.get("apt-run", []))),
    )


def load_presets(path: Path = PRESETS_FILE) -> dict[str, Variant]:
    """Every preset a user may name (hidden ones only lend values to others)."""
    raw = _raw_presets(path)
    return {name: _resolve(name, raw) for name, preset in raw.items() if not preset.get("hidden")}


def variant(names: list[str] | tuple[str, ...], path: Path = PRESETS_FILE) -> Variant:
    """The presets combined left to right: a later preset's values win (`cuda rpc`: CUDA plus RPC)."""
    presets = load_presets(path)
    unknown = [name for name in names if name not in presets]
    if unknown or not names:
        raise WorkerError(
            f"unknown build preset {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"{path.name} has: {', '.join(presets)}"
        )
    variables: dict[str, str] = {}
    for name in names:
        variables.update(presets[name].cache_variables)
    return Variant(
        names=tuple(names),
        description="; ".join(presets[name].description for name in names),
        cache_variables=variables,
        apt_build=tuple(dict.fromkeys(p for name in names for p in presets[name].apt_build)),
        apt_run=tuple(dict.fromkeys(p for name in names for p in presets[name].apt_run)),
    )


# python3 -m worker.build_presets cpu rpc          # prints CMAKE_ARGS: -DGGML_NATIVE=OFF -DGGML_RPC=ON
# python3 -m worker.build_presets --apt run cpu    # prints the Debian packages the build needs at run time
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m worker.build_presets", description=__doc__.splitlines()[0])
    parser.add_argument("--apt", choices=["build", "run"], help="print the Debian packages instead of CMAKE_ARGS")
    parser.add_argument("presets", nargs="+", metavar="PRESET")
    args = parser.parse_args(argv)
    try:
        chosen = variant(args.presets)
    except WorkerError as exc:
        raise SystemExit(f"presets: error: {exc}") from None
    print(" ".join(chosen.cmake_args() if args.apt is None else getattr(chosen, f"apt_{args.apt}")))


if __name__ == "__main__":
    main()
