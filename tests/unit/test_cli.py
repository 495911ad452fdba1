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
