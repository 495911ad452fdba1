"""The examples of README.md and docs/api.md, run against a real worker, so that none can drift from the code.

Every `curl` command of a ```sh block and every ```python block runs, with the docs' `localhost:8080` pointed at
the test worker; what needs a download, a registry or a GPU (`make`, `llm-worker serve`, `docker`) is only parsed.
The docs' links are checked too: a page or a heading that moved breaks a test, not a reader.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, start_worker

EXAMPLE_PAGES = (REPO / "README.md", REPO / "docs" / "api.md")
EXAMPLE_HOST = "localhost:8080"  # where the examples say the worker is (`make serve`'s address)
SHELLS = ("sh", "bash")
# An HTTP error fails the example (plain curl exits 0 on a 400); nothing may hang the suite.
CURL_STRICT = "curl --fail-with-body --silent --show-error --max-time 120 "
EXAMPLE_TIMEOUT_S = 180
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [Block(page, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2))
            for match in _FENCE.finditer(text)]


def commands(block: Block) -> list[str]:
    """The block's shell commands, a backslash-continued command joined into one; comments and blanks left out."""
    joined = re.sub(r"\\\n\s*", "", block.text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


BLOCKS = [block for page in EXAMPLE_PAGES for block in fenced_blocks(page)]
SHELL_BLOCKS = [block for block in BLOCKS if block.lang in SHELLS]
CURLS = [(block, command) for block in SHELL_BLOCKS for command in commands(block) if command.startswith("curl ")]
PYTHON_BLOCKS = [block for block in BLOCKS if block.lang == "python"]


@pytest.fixture(scope="module")
def example_worker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """The default model as `make serve` serves it, plus --embeddings for api.md's embeddings example."""
    worker = start_worker(tmp_path_factory.mktemp("examples"), "--embeddings", "--parallel", "4", "--ctx-size", "8192")
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


def at(worker, text: str) -> str:
    return text.replace(EXAMPLE_HOST, worker.url.removeprefix("http://"))


def test_every_page_has_examples_that_run():
    """A change to the fences or to this file's reading of them must not leave nothing to run."""
    for page in EXAMPLE_PAGES:
        run = [b for b, _ in CURLS if b.page == page] + [b for b in PYTHON_BLOCKS if b.page == page]
        assert run, f"{page.relative_to(REPO)} has no curl or python example"
    assert all(EXAMPLE_HOST in command for _, command in CURLS), "every curl example talks to localhost:8080"
    assert all(EXAMPLE_HOST in block.text for block in PYTHON_BLOCKS)


@pytest.mark.parametrize("block,command", CURLS, ids=[f"{b.name}:{c.split()[-1][:40]}" for b, c in CURLS])
def test_curl_example(example_worker, block: Block, command: str):
    strict = CURL_STRICT + at(example_worker, command).removeprefix("curl ")
    result = subprocess.run(["bash", "-c", strict], capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, f"{block.name}: {command}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    assert result.stdout.strip(), f"{block.name}: {command} printed nothing"


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.name for b in PYTHON_BLOCKS])
def test_python_example(example_worker, block: Block, tmp_path: Path):
    script = tmp_path / "example.py"
    script.write_text(at(example_worker, block.text))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                            timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, f"{block.name}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    assert result.stdout.strip(), f"{block.name} printed nothing"


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
    text = _FENCE.sub("", page.read_text())
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", DOC_PAGES, ids=[str(p.relative_to(REPO)) for p in DOC_PAGES])
def test_links_resolve(page: Path):
    broken = []
    for target in _LINK.findall(_FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"
