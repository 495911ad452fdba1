"""Small rules the code keeps: one progress type, no repeated dict key, the log bridge."""

from __future__ import annotations

import ast
import json
from collections import Counter

from tests.conftest import REPO
from tests.helpers import run_python

WORKER = REPO / "worker"


def test_the_progress_callback_type_is_spelled_once():
    spelled = [path.relative_to(REPO).as_posix() for path in WORKER.rglob("*.py")
               if "Callable[[str, int, int], None]" in path.read_text()]
    assert spelled == ["worker/progress_callback.py"]


def test_no_dict_literal_repeats_a_key():
    """A repeated key keeps its last value silently (the pre-tokenizer table had two)."""
    for path in WORKER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = Counter(k.value for k in node.keys if isinstance(k, ast.Constant))
                assert [k for k, n in keys.items() if n > 1] == [], path


def test_library_logs_come_out_as_our_events():
    run = run_python(
        "import logging\n"
        "from worker.logs import configure\n"
        "configure('json', 'info')\n"
        "hub = logging.getLogger('huggingface_hub.file_download')\n"
        "hub.warning('Trying to resume download...\\n  (attempt %d)', 2)\n"
        "hub.debug('below the level')\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    hub.exception('failed')\n"
    )
    lines = [json.loads(line) for line in run.stderr.splitlines()]
    assert [line["event"] for line in lines] == ["Trying to resume download... (attempt 2)", "failed"]
    assert all(line["logger"] == "huggingface_hub.file_download" and line["timestamp"].endswith("Z") for line in lines)
    assert [line["level"] for line in lines] == ["warning", "error"]
    assert "ZeroDivisionError" in lines[1]["exception"]
