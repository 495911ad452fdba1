"""Small rules the code keeps: what --help imports, the metrics handler."""

from __future__ import annotations

from tests.helpers import run_python


def test_help_imports_neither_numpy_nor_gguf():
    run = run_python(
        "import sys\n"
        "from worker.cli import main\n"
        "sys.argv = ['llm-worker', 'convert', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('numpy', 'gguf', 'huggingface_hub', 'llama_cpp') if m in sys.modules))"
    )
    assert run.returncode == 0, run.stderr
    assert "--type [f16|bf16|q8_0]" in run.stdout  # the choices still come from worker.source
    assert run.stdout.splitlines()[-1] == "[]"


async def test_metrics_come_from_prometheus_clients_own_handler(http, base_url):
    """It negotiates what a scraper asks for: OpenMetrics and gzip."""
    headers = {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"}
    async with http.get(base_url + "/metrics", headers=headers) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert response.headers["Content-Encoding"] == "gzip"
        text = await response.text()
    assert "llm_worker_requests_running" in text and text.endswith("# EOF\n")
    async with http.get(base_url + "/metrics") as response:
        assert response.headers["Content-Type"].startswith("text/plain")
