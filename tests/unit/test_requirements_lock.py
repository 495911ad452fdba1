"""The test extras are pinned (tests/requirements.lock, make test's constraints): every extra pyproject.toml names is
in the lock at a version its range admits, and the venv the tests run in holds exactly what the lock says, so an
outside release changes the tests only when scripts/lock-test-extras is run on purpose."""

from __future__ import annotations

import runpy

import tomllib
from packaging.requirements import Requirement

from tests.conftest import REPO

LOCK = REPO / "tests" / "requirements.lock"


def _locked() -> dict[str, str]:
    lines = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    return {Requirement(line).name.lower().replace("_", "-"): line.split("==", 1)[1] for line in lines}


def test_every_test_extra_is_pinned_within_its_range():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    locked = _locked()
    for extra in map(Requirement, extras):
        key = extra.name.lower().replace("_", "-")
        assert key in locked, f"{extra.name} is a test extra the lock does not pin"
        assert extra.specifier.contains(locked[key]), f"{extra.name}: locked {locked[key]}, pyproject asks {extra}"


def test_the_venv_holds_what_the_lock_pins():
    script = runpy.run_path(str(REPO / "scripts" / "lock-test-extras"))
    assert LOCK.read_text().splitlines()[2:] == script["pins"](), "run scripts/lock-test-extras, or make test"
