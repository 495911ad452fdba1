"""docs/development.md's layout is the tree and the import-linter contracts: every layer as pyproject.toml's
contracts list it, every module where the page says, and the benchmarks through the engine's door."""

from __future__ import annotations

import ast
import re
import sys

import pytest

from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # the oldest Python supported reads TOML with tomli, as worker/source/registry.py does
    import tomli as tomllib

GUIDE = REPO / "docs" / "development.md"
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
LAYERED = {contract["containers"][0]: contract for contract in CONTRACTS if contract["type"] == "layers"}


def _tables() -> dict[str, list[tuple[int, str, str]]]:
    """Each container's table in the Layout section: (layer, member, modules cell) rows, by the heading's folder."""
    section = GUIDE.read_text().split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, list[tuple[int, str, str]]] = {}
    folder = None
    for line in section.splitlines():
        if heading := re.match(r"^### `(worker/[\w/]*)`$", line):
            folder = heading.group(1)
            tables[folder] = []
        elif folder and re.match(r"^\| \d+ \|", line):
            layer, member, _, modules = (cell.strip() for cell in line.strip("|").split(" | "))
            tables[folder].append((int(layer), member.strip("`"), modules))
    return tables


def _module(member: str) -> str:
    return member.removesuffix(".py").removesuffix("/")


@pytest.mark.parametrize("container", sorted(LAYERED))
def test_each_table_lists_its_contracts_layers_bottom_first(container):
    rows = _tables()[container.replace(".", "/") + "/"]
    in_guide = [sorted(_module(member) for layer, member, _ in rows if layer == n)
                for n in range(1, max(layer for layer, _, _ in rows) + 1)]
    in_contract = [sorted(name.strip() for name in re.split(r"[|:]", layer))
                   for layer in reversed(LAYERED[container]["layers"])]
    assert in_guide == in_contract


def test_every_module_is_where_the_guide_says():
    tables = _tables()
    named = set()
    for folder, rows in tables.items():
        for _, member, modules in rows:
            if member.endswith(".py"):
                named.add(folder + member)
            elif folder + member not in tables:  # a package without a table of its own lists its modules
                named.update(folder + member + name for name in re.findall(r"`(\w+\.py)`", modules))
    tree = {str(path.relative_to(REPO)) for path in (REPO / "worker").rglob("*.py") if path.name != "__init__.py"}
    assert sorted(tree - named) == [], "modules the guide does not place"
    assert sorted(named - tree) == [], "modules the guide places that do not exist"


def test_every_layered_contract_is_exhaustive_and_the_doors_are_protected():
    assert all(contract.get("exhaustive") for contract in LAYERED.values())
    door = next(contract for contract in CONTRACTS if contract["type"] == "protected")
    assert door["protected_modules"] == ["worker.engine.*"] and door["allowed_importers"] == ["worker.engine"]
    # the one module behind the door others may import is the host's door
    assert {line.split(" -> ")[1] for line in door["ignore_imports"]} == {"worker.engine.host"}
    api = next(contract for contract in CONTRACTS if contract["type"] == "forbidden")
    assert api["source_modules"] == ["worker.api"] and api["forbidden_modules"] == ["worker.engine.host"]


def test_the_apis_door_is_narrow():
    """The HTTP API's door holds the served model's contract, the plain data it takes and gives and the refusals:
    a name more is a reason to think again (issue #81: from 97 names to about 20)."""
    door = (REPO / "worker" / "engine" / "__init__.py").read_text().split("__getattr__ = exports", 1)[1]
    assert len(re.findall(r'"(\w+)": "', door)) <= 26


def test_benchmarks_reach_the_engine_through_its_door():
    """bench/ is no package, so import-linter does not see it: its workloads import what the engine's doors export
    (worker/engine/__init__.py and host.py), as the API and the lifecycle do (bench/probes/ measure the engine's parts
    and the binding, as the tests do)."""
    behind = []
    for path in sorted((REPO / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if module.startswith("worker.engine.") and module != "worker.engine.host":
                behind.append(f"{path.name}:{node.lineno} {node.module}")
    assert behind == []
