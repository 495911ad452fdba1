"""A restart reuses the load-time check's answer (worker/engine/startup/check_record.py): the same flags on the same
model and build skip the check and report what it measured; a changed flag measures again."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.conftest import start_worker
from worker.engine.startup.check_record import RECORDS_ENV


def _started(tmp_path: Path, *flags: str) -> tuple[dict, str]:
    """The worker's /health exactness report and its log, the worker stopped."""
    worker = start_worker(tmp_path, "--parallel", "2", "--ctx-size", "2048", *flags,
                          env={RECORDS_ENV: str(tmp_path / "records")})
    try:
        with urllib.request.urlopen(worker.url + "/health") as response:
            exactness = json.load(response)["exactness"]
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    return exactness, worker.log()


def test_a_restart_reuses_the_load_time_check_and_a_changed_flag_measures_again(tmp_path):
    measured, first = _started(tmp_path)
    reused, second = _started(tmp_path)
    other, third = _started(tmp_path, "--threads", "1")
    assert '"load_check_reused"' not in first and '"load_check_reused"' in second, second[-3000:]
    assert '"load_check_reused"' not in third, third[-3000:]
    assert measured["decoded_cells_exact"] is measured["batch_invariant"] is measured["moved_cells_exact"] is True
    assert reused == measured == other, (measured, reused, other)
    assert len(list((tmp_path / "records").glob("*.json"))) == 2
