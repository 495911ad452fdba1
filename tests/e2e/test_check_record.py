"""A restart reuses the load-time check's answer and the draft passes' costs (worker/engine/startup/check_record.py):
the same flags on the same model and build skip the check and the timing and report what they measured; a changed
flag measures again."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from tests.conftest import start_worker
from worker.engine.startup.check_record import RECORDS_ENV


def _started(tmp_path: Path, *flags: str) -> tuple[dict, str, int]:
    """The worker's exactness report, its log and its resident bytes, stopped once no pass is left to time (on busy
    cores startup leaves some, timed once idle: the costs are kept then)."""
    worker = start_worker(tmp_path, "--parallel", "2", "--ctx-size", "2048", *flags,
                          env={RECORDS_ENV: str(tmp_path / "records")})
    try:
        for _ in range(600):
            with urllib.request.urlopen(worker.url + "/health") as response:
                health = json.load(response)
            if not health["untimed_pass_rows"]:
                break
            time.sleep(0.1)
        assert health["untimed_pass_rows"] == [], health
        status = Path(f"/proc/{worker.process.pid}/status").read_text()
        resident = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) * 1024
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    return health["exactness"], worker.log(), resident


def test_a_restart_reuses_the_load_time_check_and_a_changed_flag_measures_again(tmp_path):
    measured, first, _ = _started(tmp_path)
    reused, second, _ = _started(tmp_path)
    other, third, _ = _started(tmp_path, "--threads", "1")
    assert '"load_check_reused"' not in first and '"load_check_reused"' in second, second[-3000:]
    assert '"load_check_reused"' not in third, third[-3000:]
    assert measured["decoded_cells_exact"] is measured["batch_invariant"] is measured["moved_cells_exact"] is True
    assert reused == measured == other, (measured, reused, other)
    timed, again = _logged(first, "passes_timed", last=True), _logged(second, "passes_reused")
    assert timed["ms"] == again["ms"] and len(timed["ms"]) >= 8 and '"passes_timed"' not in second, second[-3000:]
    assert _logged(third, "passes_timed")["ms"] != timed["ms"]  # timed again, at one thread
    records = sorted(path.name.removeprefix(path.name.split(".")[0]) for path in (tmp_path / "records").iterdir())
    assert records == [".json", ".json", ".passes.json", ".passes.json"], records


def test_the_same_context_asked_for_in_other_words_reuses_the_check(tmp_path):
    """--ctx-size 0 is the model's training context (8,192 tokens for the test model): a start that names 8192
    makes the same context, and reuses the check and the passes. The cells the check and the timing wrote are given
    back before serving (patch 0013 clears by returning pages): the start that measured holds about what the one
    that reused holds, where it held ~60 MiB more when they stayed resident."""
    _, first, measured_rss = _started(tmp_path, "--ctx-size", "0")
    _, second, reused_rss = _started(tmp_path, "--ctx-size", "8192")
    assert '"load_check_reused"' not in first and '"load_check_reused"' in second, second[-3000:]
    assert '"passes_reused"' in second, second[-3000:]
    assert measured_rss - reused_rss < 32 << 20, (measured_rss >> 20, reused_rss >> 20)


def _logged(log: str, event: str, last: bool = False) -> dict:
    """The log's first line of `event` (its last: the costs kept, where passes left at load were timed idle)."""
    lines = [line for line in log.splitlines() if f'"event": "{event}"' in line]
    return json.loads(lines[-1 if last else 0])
