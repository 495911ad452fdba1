"""The fenced examples of README.md and docs/api.md, read as the example tests run them: the blocks of each
page, a shell block's commands, the curl commands and python blocks among them; and the flags `make serve` serves
them with."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

EXAMPLE_PAGES = (REPO / "README.md", REPO / "docs" / "api.md")
EXAMPLE_HOST = "localhost:8080"  # where the examples say the worker is (`make serve`'s address)
SHELLS = ("sh", "bash")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


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
            for match in FENCE.finditer(text)]


def commands(block: Block) -> list[str]:
    """The block's shell commands, a backslash-continued command joined into one; comments and blanks left out."""
    joined = re.sub(r"\\\n\s*", "", block.text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


BLOCKS = [block for page in EXAMPLE_PAGES for block in fenced_blocks(page)]
SHELL_BLOCKS = [block for block in BLOCKS if block.lang in SHELLS]
CURLS = [(block, command) for block in SHELL_BLOCKS for command in commands(block) if command.startswith("curl ")]
PYTHON_BLOCKS = [block for block in BLOCKS if block.lang == "python"]


def make_serve_flags() -> list[str]:
    """The `llm-worker serve` flags of the Makefile's serve target (the one the examples' pages run against), less
    `--port $(PORT)`: a test worker takes a free port."""
    recipe = re.search(r"^serve: .*\n\t(.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert recipe, "the Makefile has no serve target with a one-line recipe"
    words = shlex.split(recipe.group(1))
    assert words[0].endswith("/llm-worker") and words[1] == "serve", recipe.group(1)
    flags = words[2:]
    port = flags.index("--port")
    del flags[port:port + 2]
    assert not any("$(" in flag for flag in flags), f"make serve passes a make variable the tests cannot: {flags}"
    return flags
