"""The examples of README.md and docs/api.md without a worker: each page has some to run, every shell block parses,
the README's commands are the Makefile's targets. The docs' links are checked too: a page or a heading that moved
breaks a test, not a reader. tests/e2e/test_examples.py runs the examples.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.examples_helpers import (
    BLOCKS,
    CURLS,
    EXAMPLE_HOST,
    EXAMPLE_PAGES,
    FENCE,
    PYTHON_BLOCKS,
    SHELL_BLOCKS,
    SHELLS,
    Block,
    commands,
)


def test_every_page_has_examples_that_run():
    """A change to the fences or to this file's reading of them must not leave nothing to run."""
    for page in EXAMPLE_PAGES:
        run = [b for b, _ in CURLS if b.page == page] + [b for b in PYTHON_BLOCKS if b.page == page]
        assert run, f"{page.relative_to(REPO)} has no curl or python example"
    assert all(EXAMPLE_HOST in command for _, command in CURLS), "every curl example talks to localhost:8080"
    assert all(EXAMPLE_HOST in block.text for block in PYTHON_BLOCKS)


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[b.name for b in SHELL_BLOCKS])
def test_shell_example_parses(block: Block):
    """Lines that need a download, a registry or a GPU don't run here; they must at least be valid shell."""
    result = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
    assert result.returncode == 0, f"{block.name}: {result.stderr}"


def test_the_readme_commands_are_the_makefile_targets_ci_runs():
    first = commands(next(block for block in BLOCKS if block.page.name == "README.md" and block.lang in SHELLS))
    assert [line.split("#")[0].strip() for line in first] == ["make serve", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^serve: ", makefile, re.MULTILINE) and re.search(r"^test: ", makefile, re.MULTILINE)
    assert "make test" in (REPO / ".ci" / "run").read_text().splitlines()


# Links: every relative link of the README and docs/ names a file that exists, and a heading that it has.
DOC_PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", page.read_text())
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", DOC_PAGES, ids=[str(p.relative_to(REPO)) for p in DOC_PAGES])
def test_links_resolve(page: Path):
    broken = []
    for target in _LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"
