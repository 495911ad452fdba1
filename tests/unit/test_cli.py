"""The command line without running it: the configuration page documents every serve flag in serve's sections,
and the micro-batch default per backend."""

import re

import pytest

from tests.conftest import REPO


def test_the_configuration_page_documents_every_serve_flag_in_the_same_sections():
    from worker.cli import SERVE_SECTIONS, serve

    page = (REPO / "docs" / "configuration.md").read_text()
    assert re.findall(r"^### (.+)$", page, re.MULTILINE) == list(SERVE_SECTIONS)
    undocumented = [param.opts[0] for param in serve.params if param.name != "help" and f"`{param.opts[0]}" not in page]
    assert not undocumented, f"docs/configuration.md lacks {undocumented}"


def test_every_documented_default_is_the_codes():
    """docs/configuration.md's default for each serve flag that has one in the code is that default, as the flag's
    row writes it in its default column: `value` for numbers and names, off for a switch."""
    from worker.cli import serve

    defaults = {}  # a flag, as a row's first cell names it: that row's default cell
    for line in (REPO / "docs" / "configuration.md").read_text().splitlines():
        cells = line.split(" | ")
        if line.startswith("| `--") and len(cells) > 3:
            defaults |= {flag: cells[2] for flag in re.findall(r"`(--[\w-]+)", cells[0])}
    wrong = []
    for param in serve.params:
        default = param.default
        if param.name == "help" or default is None or not isinstance(default, (bool, int, float, str)):
            continue
        said = "off" if default is False else f"`{default:g}`" if isinstance(default, float) else f"`{default}`"
        if said not in defaults[param.opts[0]]:
            wrong.append(f"{param.opts[0]}: the code says {said}, the page {defaults[param.opts[0]]!r}")
    assert not wrong, wrong


@pytest.mark.parametrize("args,batch,ubatch", [
    ((), 512, 256), (("--backend", "cuda"), 2048, 512), (("-ub", "128"), 512, 128),
    (("--backend", "cuda", "-b", "1024"), 1024, 512),
])
def test_the_batches_default_by_backend(args, batch, ubatch):
    """The cpu backend's compute buffer is in RAM and grows with -ub (256 there); a GPU keeps llama.cpp's 512, and
    llama.cpp's 2048 for the batch: a prefill chunk there is the whole batch, run as micro-batches back to back
    (scheduler.chunk_budget)."""
    from worker.cli import serve
    from worker.settings import settings_from_flags

    flags = serve.make_context("serve", list(args)).params
    engine = settings_from_flags(flags).engine
    assert (engine.batch_size, engine.ubatch_size) == (batch, ubatch)
