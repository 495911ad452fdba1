"""/openapi.json without a worker: the document names exactly the app's routes, and its token-id pattern exactly
the ids a vocabulary has. tests/e2e/test_schemathesis.py fuzzes a real worker against it."""

from __future__ import annotations

import re

from worker.api.openapi import decimal_below


async def test_openapi_document_matches_the_routes():
    from worker.api import WorkerState, build_app
    from worker.api.openapi import document
    from worker.settings import Settings

    app = build_app(WorkerState(Settings(model=None, model_ref=None, worker_id="w"), model_id="m"))
    served = {(route.method.lower(), route.resource.canonical) for route in app.router.routes()
              if route.method != "HEAD"}
    documented = {(method, path) for path, item in document()["paths"].items() for method in item}
    assert served == documented


def test_token_ids_in_the_document_are_exactly_the_models():
    """logit_bias keys: the decimal strings of 0..n_vocab-1 (leading zeros too, as the validator's int() reads)."""
    for n_vocab in (1, 10, 11, 100, 32000, 49152, 151936):
        pattern = re.compile(decimal_below(n_vocab))
        for i in [*range(min(n_vocab + 20, 1200)), *range(n_vocab - 1100, n_vocab + 1100), 10 * n_vocab]:
            for text in (str(i), f"00{i}"):
                assert bool(pattern.match(text)) == (0 <= i < n_vocab), (n_vocab, text)
        assert not any(pattern.match(text) for text in ("", "-1", "1a", "\u00b2"))
