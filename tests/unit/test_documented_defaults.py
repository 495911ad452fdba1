"""Every default the user pages state for a command-line flag is the code's: the flag tables' default column, and
prose such as "`--flag` (default X)", "`--flag` seconds (X by default)", "`--flag X` (the default)". The code's
value is read from the click commands themselves (worker/cli.py), and for the defaults that depend on the backend
from the functions that decide them (worker/engine/config.py, worker/engine/exactness/kv_plan.py): nothing here
repeats a value."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from tests.conftest import REPO

PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
FLAG = r"`(--[a-z][\w-]*)(?: [^`]*)?`"  # `--flag` or `--flag VALUE`: the flag
NUMBER = re.compile(r"^([\d,]*\d(?:\.\d+)?)(?![\d.])(?:\s*(MiB|MB|s|seconds)\b)?")
GPU = "cuda"  # any GPU backend: the defaults below tell only the cpu backend from the rest
MIB = 2**20


@dataclass(frozen=True)
class Stated:
    page: str
    line: int
    flag: str
    value: str  # the page's words for the default, backticks removed

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.flag} default {self.value!r}"


# Prose that states a flag's default, within one paragraph (its lines joined). The flag comes first, then words of the
# same clause (no other flag, no sentence's end), then the value: "(default X", "(X by default", ", X by default",
# "`--flag X` (the default" / ", the default" / " is the default", "defaults to X".
PROSE = [re.compile(FLAG + r"[^`.;]{0,60}?\(default ([^)]+)\)"),
         re.compile(FLAG + r"[^`.;()]{0,40}?\(([^()`]+?) by default((?: on (?:a|the) (?:GPU|cpu)[a-z ]*)?)"),
         re.compile(FLAG + r", ([^,;()`]+?) (?:at most )?by default((?: on (?:a|the) (?:GPU|cpu)[a-z ]*)?)"),
         re.compile(FLAG + r", by default ([^,;()`]+)"),
         re.compile(r"`(--[a-z][\w-]*) ([\w.-]+)`,? \(?(?:is )?the default\b"),
         re.compile(FLAG + r" defaults? to ([^.;,()]+)")]


def paragraphs(text: str) -> list[tuple[int, str]]:
    """A page's paragraphs outside code blocks (each list item and table row apart), with their first line's
    number, lines joined."""
    found: list[tuple[int, str]] = []
    start, lines, fenced = 0, [], False
    for number, line in enumerate([*text.splitlines(), ""], 1):
        text_line = line.strip()
        if text_line.startswith("```"):
            fenced = not fenced
        if fenced or not text_line or text_line.startswith(("```", "- ", "|", "#")) or re.match(r"\d+\. ", text_line):
            if lines:
                found.append((start, " ".join(lines)))
            start, lines = number, [text_line] if text_line and not fenced and not text_line.startswith("```") else []
        else:
            start, lines = (start if lines else number), [*lines, text_line]
    return found


def table_defaults(page: Path) -> list[Stated]:
    """Rows of a table with a `default` column whose first cell names flags: that column, split by ` / ` where the
    row names several flags (`--convert-type` / `--quantize` | `f16` / none)."""
    stated, column = [], None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if not line.startswith("|"):
            column = None
        elif column is None:
            column = cells.index("default") if "default" in cells else -1
        elif column >= 0 and (flags := re.findall(r"`(--[\w-]+)", cells[0])):
            values = cells[column].split(" / ")
            for flag, value in zip(flags, values if len(values) == len(flags) else [cells[column]] * len(flags)):
                stated.append(Stated(page.name, number, flag, value.replace("`", "").strip()))
    return stated


def prose_defaults(page: Path) -> list[Stated]:
    stated = []
    for number, text in paragraphs(page.read_text()):
        for pattern in PROSE:
            for match in pattern.finditer(text):
                value = " ".join(part for part in match.groups()[1:] if part).replace("`", "").strip()
                stated.append(Stated(page.name, number, match.group(1), value))
    return stated


def documented() -> list[Stated]:
    return [statement for page in PAGES for statement in (*table_defaults(page), *prose_defaults(page))]


def options() -> dict[str, click.Option]:
    """Every option of the worker's commands by its long name: serve's first, then the others' (pull, convert...)."""
    from worker.cli import cli, serve

    found: dict[str, click.Option] = {}
    for command in (serve, *cli.commands.values()):
        for param in command.params:
            if isinstance(param, click.Option):
                for name in param.opts:
                    found.setdefault(name, param)
    return found


def backend_defaults() -> dict[str, dict[str, int]]:
    """The flags whose default the backend decides (click's default: None), as the code decides them."""
    from worker.engine.config import default_batch_size, default_ubatch_size

    return {"--batch-size": {"cpu": default_batch_size("cpu"), "gpu": default_batch_size(GPU)},
            "--ubatch-size": {"cpu": default_ubatch_size("cpu"), "gpu": default_ubatch_size(GPU)}}


def per_backend(value: str) -> dict[str, int]:
    """"256 on the cpu backend, 512 on a GPU backend", "512 on cpu, else 2048", "512 on a GPU": the number said for
    each backend."""
    said = {}
    for part in re.split(r",\s*|;\s*", value):
        number = re.search(r"\d+", part)
        backend = ("cpu" if re.search(r"\bcpu\b", part) else
                   "gpu" if re.search(r"\bGPU\b|^else\b", part) else None)
        if number and backend:
            said[backend] = int(number.group())
    return said


def literal(value: str, option: click.Option) -> object:
    """What the page's words say the value is: a number (MiB converted for a BYTES flag), off for a switch, none
    for no value, else the word itself; None for words that describe rather than state (`the host's name`)."""
    if value in ("off", "on") and option.is_flag:
        return value == "on"
    if value == "none":
        return "none"
    if number := NUMBER.match(value):
        amount = float(number.group(1).replace(",", ""))
        if number.group(2) == "MiB" and option.metavar == "BYTES":
            amount *= MIB
        return amount
    if re.fullmatch(r"[\w.:-]+", value):
        return value
    return None


def mismatch(statement: Stated, option: click.Option, backend: dict[str, dict[str, int]]) -> str | None:
    """Why a statement is not the code's default, or None when it is (or only describes a default the code leaves
    to the model or the machine, click's None)."""
    if statement.flag in backend:
        said = per_backend(statement.value)
        if not said:
            return f"{statement}: say which backend each value is for (the code: {backend[statement.flag]})"
        wrong = {name: number for name, number in said.items() if backend[statement.flag][name] != number}
        return f"{statement}: the code says {backend[statement.flag]}" if wrong else None
    default = option.default if isinstance(option.default, (bool, int, float, str)) else None  # --lora: none
    said = literal(statement.value, option)
    if said is None:
        return None if default is None else f"{statement}: the code says {default!r}; state it as a value"
    if said == "none":
        return None if default is None else f"{statement}: the code says {default!r}"
    if isinstance(default, bool) or isinstance(said, bool):
        return None if said is default else f"{statement}: the code says {default!r}"
    if isinstance(default, (int, float)) and isinstance(said, float):
        return None if said == default else f"{statement}: the code says {default!r}"
    return None if str(said) == str(default) else f"{statement}: the code says {default!r}"


def test_the_pages_state_defaults_this_test_reads():
    """The parse finds what it must: each flag table's rows, and prose defaults on the operations and API pages,
    backend-dependent ones among them (a test that finds nothing would pass whatever the pages say)."""
    stated = documented()
    pages = {statement.page for statement in stated}
    assert {"configuration.md", "operations.md", "api.md"} <= pages, pages
    from worker.cli import serve

    in_table = {statement.flag for statement in table_defaults(REPO / "docs" / "configuration.md")}
    assert {param.opts[0] for param in serve.params if isinstance(param, click.Option)} - {"--help"} <= in_table
    assert {statement.flag for statement in stated if statement.page == "api.md"} >= {"--ubatch-size",
                                                                                        "--image-max-bytes"}


def test_every_default_the_pages_state_is_the_codes():
    known, backend = options(), backend_defaults()
    wrong = [reason for statement in documented() if statement.flag in known
             and (reason := mismatch(statement, known[statement.flag], backend))]
    assert not wrong, "\n".join(wrong)


def test_the_cell_types_documented_are_the_ones_the_code_picks():
    """--cache-type-k/-v default by mode, backend and build (kv_plan.plan_attention): the configuration row and
    the memory section of operations.md say which."""
    from worker.engine.exactness.kv_plan import plan_attention
    from worker.engine.modes import CacheMode

    def cells(backend: str = "cpu", mode: CacheMode = CacheMode.EXACT, invariant: bool = True,
              key: str | None = None) -> tuple[str, str]:
        plan = plan_attention(backend, False, mode, "auto", key, None, batch_invariant=invariant)
        return plan.cache_type_k, plan.cache_type_v

    row = next(line for line in (REPO / "docs" / "configuration.md").read_text().splitlines()
               if line.startswith("| `--cache-type-k`"))
    both = re.search(r"Both default to `(\w+)`, except in `exact` and `off` modes on the cpu backend without the "
                     r"batch-invariant build", row)
    fallback = re.search(r"there K defaults to `(\w+)` and V to `(\w+)`", row)
    given_f16 = re.search(r"given `--cache-type-k (\w+)`, V goes to `(\w+)`", row)
    assert both and fallback and given_f16, "configuration.md's --cache-type-k row is worded otherwise: read it here"
    default = (both.group(1), both.group(1))
    assert default == cells() == cells(mode=CacheMode.FAST) == cells(backend=GPU) == cells(mode=CacheMode.OFF)
    assert fallback.groups() == cells(invariant=False)
    assert given_f16.group(2) == cells(invariant=False, key=given_f16.group(1))[1]

    memory = " ".join((REPO / "docs" / "operations.md").read_text().split())
    said = re.search(r"Exact mode's K and V cells default to `(\w+)` on the batch-invariant build, as fast mode's "
                     r"do; only its fallback without that build \(a plain `pip install`\) defaults K to `(\w+)`",
                     memory)
    assert said, "operations.md's Memory section is worded otherwise: read it here"
    assert (said.group(1), said.group(1)) == cells() == cells(mode=CacheMode.FAST)
    assert said.group(2) == cells(invariant=False)[0]


@pytest.mark.parametrize("value,said", [
    ("256 on the cpu backend, 512 on a GPU backend", {"cpu": 256, "gpu": 512}),
    ("512 on cpu, else 2048", {"cpu": 512, "gpu": 2048}),
    ("512 on a GPU", {"gpu": 512}), ("512", {}),
])
def test_a_backend_dependent_default_is_read_per_backend(value, said):
    assert per_backend(value) == said
