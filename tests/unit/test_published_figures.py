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
# The README's rows: (summary, level as PROMPTxCLIENTS or None for the run's own figures, the figures a cell quotes
# in order). RSS_LESS_MODEL: the run's peak RSS less its model file's size.
RSS_LESS_MODEL = "peak_rss_mb"
ROWS = {
    "tok/s, 1 client, drafts off": ("throughput-drafts-off", "128x1", ("agg_tok_s",)),
    "tok/s, 8 clients, drafts off": ("throughput-drafts-off", "128x8", ("agg_tok_s",)),
    "tok/s, 1 client, drafts on": ("throughput-drafts-on", "128x1", ("agg_tok_s",)),
    "tok/s, 8 clients, drafts on": ("throughput-drafts-on", "128x8", ("agg_tok_s",)),
    "time to first token p50, 8 clients, drafts off": ("throughput-drafts-off", "128x8", ("ttft_p50_ms",)),
    "peak RSS less the model, drafts off": ("throughput-drafts-off", None, (RSS_LESS_MODEL,)),
    "a one-image chat (SigLIP-base's encoder, 576 image tokens), first token; the same image next turn": (
        "images", None, ("first_ms", "second_ms")),
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


def test_the_readme_rows_quote_their_runs():
    rows = readme_rows()
    assert rows.keys() == ROWS.keys(), f"README rows missing: {ROWS.keys() - rows.keys()}"
    for label, (name, level, wanted) in ROWS.items():
        run = summary(name)
        for server, cell in zip(SERVERS, rows[label]):
            quoted = [number.replace(",", "") for number in NUMBER.findall(cell)]
            if server not in run["servers"]:
                assert not quoted, f"{label}, {server}: {cell!r} quotes a server the run did not measure"
                continue
            assert len(quoted) >= len(wanted), f"{label}, {server}: {len(wanted)} figures wanted in {cell!r}"
            figures = run["servers"][server] if level is None else run["servers"][server][level]
            for figure, text in zip(wanted, quoted):
                value = figures[figure] - run["model_mb"] if figure == RSS_LESS_MODEL else figures[figure]
                decimals = len(text.split(".")[1]) if "." in text else 0
                assert float(text) == round(value, decimals), f"{label}, {server}: README {text}, {name} {value}"


def test_the_drafts_off_run_had_drafts_off_on_every_server():
    assert summary("throughput-drafts-off")["drafts"] == "off"
    assert summary("throughput-drafts-on")["drafts"] == "on"
    assert all(summary(name)["rounds"] >= 3 for name in ("throughput-drafts-off", "throughput-drafts-on"))
