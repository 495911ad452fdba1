"""The README's figures against the committed runs they come from (docs/benchmarks.md, "The rules"): each quoted
figure is in its run's summary under bench/results/summaries/, and each summary says when, where, at which commit
and by which command it was made."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUMMARIES = REPO / "bench" / "results" / "summaries"
SERVERS = ("llm-worker", "llama-server", "llama_cpp.server")  # the README table's columns, in order
# The README's throughput rows: (summary, level as PROMPTxCLIENTS, figure); level None: the whole run's.
ROWS = {
    "tok/s, 1 client, drafts off": ("throughput-drafts-off", "128x1", "agg_tok_s"),
    "tok/s, 8 clients, drafts off": ("throughput-drafts-off", "128x8", "agg_tok_s"),
    "tok/s, 1 client, drafts on": ("throughput-drafts-on", "128x1", "agg_tok_s"),
    "tok/s, 8 clients, drafts on": ("throughput-drafts-on", "128x8", "agg_tok_s"),
    "time to first token p50, 8 clients, drafts off": ("throughput-drafts-off", "128x8", "ttft_p50_ms"),
    "peak RSS less the model, drafts off": ("throughput-drafts-off", None, "peak_rss_mb"),
}
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def summary(name: str) -> dict:
    return json.loads((SUMMARIES / f"{name}.json").read_text())


def readme_rows() -> dict[str, list[str]]:
    rows = {}
    for line in (REPO / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells and cells[0] in ROWS:
            rows[cells[0]] = cells[1:1 + len(SERVERS)]
    return rows


def test_every_summary_says_when_where_what_and_how():
    names = sorted(SUMMARIES.glob("*.json"))
    assert names, "no committed run"
    for path in names:
        run = json.loads(path.read_text())
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", run["date"]) and re.fullmatch(r"[0-9a-f]{7,}", run["commit"]), path
        assert run["command"].startswith("bench/run.py ") and run["machine"] and run["servers"], path
        assert isinstance(run["load_before"], float), path


def test_the_readme_throughput_rows_quote_their_runs():
    rows = readme_rows()
    assert rows.keys() == ROWS.keys(), f"README rows missing: {ROWS.keys() - rows.keys()}"
    for label, (name, level, figure) in ROWS.items():
        run = summary(name)
        for server, cell in zip(SERVERS, rows[label]):
            found = NUMBER.search(cell)
            if server not in run["servers"]:
                assert found is None, f"{label}, {server}: {cell!r} quotes a server the run did not measure"
                continue
            assert found is not None, f"{label}, {server}: no figure in {cell!r}"
            quoted = found.group().replace(",", "")
            figures = run["servers"][server]
            value = figures[figure] - run["model_mb"] if level is None else figures[level][figure]
            decimals = len(quoted.split(".")[1]) if "." in quoted else 0
            assert float(quoted) == round(value, decimals), f"{label}, {server}: README {quoted}, {name} {value}"


def test_the_drafts_off_run_had_drafts_off_on_every_server():
    assert summary("throughput-drafts-off")["drafts"] == "off"
    assert summary("throughput-drafts-on")["drafts"] == "on"
    assert all(summary(name)["rounds"] >= 3 for name in ("throughput-drafts-off", "throughput-drafts-on"))
