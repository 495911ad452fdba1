"""The README's figures, and docs/benchmarks.md's exact-speed table, against the committed runs they come from
(docs/benchmarks.md, "The rules"): both tables are what bench/tables.py writes from the summaries under
bench/results/summaries/, other quoted figures are in their run's summary, and each summary says when, where, at
which commit and by which command it was made."""

from __future__ import annotations

import functools
import itertools
import json
import re
import statistics
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from bench import tables

REPO = Path(__file__).resolve().parents[2]
SUMMARIES = REPO / "bench" / "results" / "summaries"


NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
ASIDE = re.compile(r"\([^)]*\)")  # a cell's parenthesized aside: ratios, ranges, flags; not a quoted figure


def summary(name: str) -> dict:
    return json.loads((SUMMARIES / f"{name}.json").read_text())


def quoted(cell: str) -> list[str]:
    return [number.replace(",", "") for number in NUMBER.findall(ASIDE.sub("", cell))]


def same(text: str, value: float) -> bool:
    """The README's figure is the summary's, rounded as the README writes it."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(text) == round(value, decimals)


def test_every_summary_says_when_where_what_and_how():
    names = sorted(SUMMARIES.glob("*.json"))
    assert names, "no committed run"
    for path in names:
        run = json.loads(path.read_text())
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", run["date"]) and re.fullmatch(r"[0-9a-f]{7,}", run["commit"]), path
        assert re.match(r"bench/\w+\.py ", run["command"]) and run["machine"] and run["servers"], path
        assert isinstance(run["load_before"], float) and run["rounds"] >= 1, path


def test_the_published_tables_are_what_their_runs_give():
    """bench/tables.py writes the README's comparison table and docs/benchmarks.md's first-token table from the
    committed summaries (--write): a figure typed by hand, or a run committed without writing its table again,
    fails here."""
    for table in tables.TABLES:
        assert table.held() == table.written(), (
            f"{table.page.name}'s {table.render.__name__} table differs from its runs: .venv/bin/python "
            "bench/tables.py --write")


def test_every_readme_figure_row_has_a_run_that_measured_its_servers():
    for row in tables.ROWS:
        servers = summary(row.run)["servers"]
        named = [*(name for column in row.cells for name in (column.server, *column.best_of) if name),
                 row.reference_server()]
        assert all(name in servers for name in named if name), (row.label, named, list(servers))
        assert "{" in row.cells[0].text, f"{row.label}: llm-worker's cell quotes no figure"


def test_a_peer_built_without_our_patches_is_marked_where_its_figures_are_quoted():
    """A llama-server figure from a run whose peer was built without our patches (its summary names no patch set)
    carries the mark, one from a peer built like the worker does not, and each page's table says what the mark means
    where a row of it carries it."""
    for page, rows in _published_rows().items():
        marked = False
        for row in rows:
            line = _line(page, row.label)
            if row.cells[1].quoted(summary(row.run)["servers"]):
                unpatched = not summary(row.run).get("llama_server_patches")
                assert line.split("|")[3].rstrip().endswith(tables.UNPATCHED) == unpatched, (page, row.label)
                marked |= unpatched
        assert (tables.UNPATCHED_NOTE in page.read_text()) == marked, f"{page.name}'s note on the mark"


def test_every_comparison_row_names_its_runs_date_and_commit():
    """A reader can tell which code a row measured (docs/benchmarks.md, "The rules"): its run's date and commit are in
    its last cell, and that commit is one of this repository's (`bench/tables.py --stale` diffs it against HEAD)."""
    for page, rows in _published_rows().items():
        for row in rows:
            run = summary(row.run)
            assert _line(page, row.label).split("|")[-2].strip().endswith(f"{run['date']} `{run['commit'][:7]}`"), (
                page, row.label)
            known = subprocess.run(["git", "cat-file", "-e", f"{run['commit']}^{{commit}}"], cwd=REPO)
            assert known.returncode == 0 or _shallow(), f"{row.run}'s commit {run['commit']} is not in this repository"


def test_the_readme_quotes_named_rows_of_the_whole_comparison():
    """README_ROWS names rows that exist: a renamed row would drop out of the README's table unseen."""
    assert set(tables.README_ROWS) <= {row.label for row in tables.ROWS}
    assert len(tables.README_ROWS) == len(set(tables.README_ROWS)) >= 5


def _published_rows() -> dict[Path, list[tables.Row]]:
    """Each page with a comparison table, and the rows it holds."""
    return {REPO / "README.md": [row for row in tables.ROWS if row.label in tables.README_ROWS],
            REPO / "docs" / "benchmarks.md": list(tables.ROWS)}


def _line(page: Path, label: str) -> str:
    return next(line for line in page.read_text().splitlines() if line.startswith(f"| {label} |"))


def test_stale_names_the_measured_files_changed_since_a_run():
    """`--stale`'s diff: the files of the measured code a later commit changed, and none for HEAD itself."""
    if _shallow():
        pytest.skip("a shallow clone holds no earlier commit to diff against")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert tables.changed_since(head) == []
    last_worker_change = subprocess.run(["git", "log", "-1", "--format=%H", "--", "worker"], cwd=REPO,
                                        capture_output=True, text=True).stdout.strip()
    changed = tables.changed_since(f"{last_worker_change}~1")
    assert changed and all(path.startswith(tables.MEASURED_CODE) for path in changed), changed


def _shallow() -> bool:
    return subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip() == "true"


def test_the_readme_says_how_many_texts_drafts_left_unchanged():
    """The README's "greedy text unchanged by drafts" row quotes the count bench/SPECULATIVE.md's run compared, all
    equal (the summary does not keep it; the report prints it)."""
    cell = next(line for line in (REPO / "README.md").read_text().splitlines()
                if line.startswith("| greedy text unchanged by drafts |")).split("|")[2]
    said = re.fullmatch(r"\s*yes \((\d+) of (\d+)\)\s*", cell)
    run = re.search(r"llm-worker texts with drafts equal to without: (\d+) of (\d+)",
                    (REPO / "bench" / "SPECULATIVE.md").read_text())
    assert said and run, (cell, run)
    assert said.groups() == run.groups() and run.group(1) == run.group(2), (said.groups(), run.groups())


def test_peer_comparisons_ran_three_alternated_rounds():
    """docs/benchmarks.md's rules: a row that sets llm-worker beside a peer quotes medians of at least 3 rounds."""
    for row in tables.ROWS:
        run = summary(row.run)
        if len(run["servers"]) > 1:
            assert run["rounds"] >= 3, row.run


def test_the_drafts_off_run_had_drafts_off_on_every_server():
    assert summary("throughput-drafts-off")["drafts"] == "off"
    assert summary("throughput-drafts-on")["drafts"] == "on"
    assert all(summary(name)["rounds"] >= 3 for name in ("throughput-drafts-off", "throughput-drafts-on"))


def _ratio(name: str, ours: tuple[str, ...], theirs: tuple[str, ...]) -> float:
    servers = summary(name)["servers"]
    return functools.reduce(dict.__getitem__, ours, servers) / functools.reduce(dict.__getitem__, theirs, servers)


# Rows of "not reached" whose measured ratio is one of a committed run's figures over another.
NOT_REACHED = {
    "one stream's decode, drafts off: 1.0x llama-server": lambda: _ratio(
        "throughput-drafts-off", ("llm-worker", "128x1", "decode_tok_s_p50"),
        ("llama-server", "128x1", "decode_tok_s_p50")),
    "embeddings in exact mode: inputs a second at least llama-server's `--embeddings`": lambda: statistics.median(
        summary("embeddings")["round_ratios"]["llama-server"]["llm-worker exact"]["single_inputs_s"]),
}
RATIO = re.compile(r"(\d+\.\d+)x")
# Rows of "not reached" that quote each round's ratio to llama-server: "M.MMx, rounds L.LL-H.HHx", M their median.
ROUND_RATIOS = {
    "a hybrid model's multi-turn chat (LFM2-1.2B's shape): llama-server's wall time": (
        "chat-hybrid", "llm-worker exact no drafts", "wall s"),
    "multi-turn chat on Q4_K_M weights: 0.9x llama-server's wall time": (
        "chat-q4_k_m", "llm-worker exact no drafts", "wall s"),
    "multi-turn chat on the test model (Q4_1): 0.9x llama-server's wall time": (
        "chat", "llm-worker exact no drafts", "wall s"),
    "multi-turn chat on F16 weights: 0.9x llama-server's wall time": (
        "chat-f16", "llm-worker exact no drafts", "wall s"),
}


def not_reached_cells(labels: Iterable[str]) -> dict[str, str]:
    """The "not reached" table's measured cells, in docs/benchmarks.md (the README links to it)."""
    measured = {}
    for line in (REPO / "docs" / "benchmarks.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] in labels:
            measured[cells[0]] = cells[1]
    return measured


def test_the_not_reached_rows_quote_their_runs():
    measured = not_reached_cells(NOT_REACHED)
    assert measured.keys() == NOT_REACHED.keys()
    for label, value in NOT_REACHED.items():
        first = RATIO.search(measured[label])
        assert first and same(first.group(1), value()), f"{label}: README {measured[label]!r}, run {value():.3f}"


def test_the_not_reached_round_ratios_are_their_runs_rounds():
    measured = not_reached_cells(ROUND_RATIOS)
    assert measured.keys() == ROUND_RATIOS.keys()
    for label, (name, server, figure) in ROUND_RATIOS.items():
        rounds = summary(name)["round_ratios"][server][figure]
        found = re.match(r"(\d\.\d\d)x, rounds (\d\.\d\d)-(\d\.\d\d)x", measured[label])
        assert found and len(rounds) >= 3, f"{label}: {measured[label]!r}, {rounds}"
        for text, value in zip(found.groups(), (statistics.median(rounds), min(rounds), max(rounds))):
            assert near(text, value), f"{label}: README {text}, {name} {value:.3f}"


def near(text: str, value: float) -> bool:
    """A ratio as the run's report printed it (2 decimals of the unrounded ratio), against the summary's ratio,
    which older runs kept to 3 decimals: 1.1349 prints 1.13 and was kept as 1.135."""
    return abs(float(text) - value) <= 0.005 + 0.0005


PATCHES = REPO / "patches" / "llama.cpp"
PROBE_RESULTS = REPO / "bench" / "probes" / "RESULTS.md"
# A figure as the headers and RESULTS.md write one: not a part of a name (Q4_1, SmolLM2-135M, x86-64's 86).
FIGURE = re.compile(r"(?<![\w.,])\d+(?:,\d{3})*(?:\.\d+)?(?!\w)")
# What a header names rather than measures: the architecture, another patch (0001-0005), the test model's shape.
NOT_MEASURED = re.compile(r"x86-64|\b0\d{3}\b(?:-0\d{3}\b)?|\d+ (?:query|KV|K/V) heads|head size \d+")
# Where in RESULTS.md each patch's measurement is recorded: the sections (headings, by how they begin) that hold
# its probe, machine and date. A figure elsewhere in the file (a 9, a 512, another probe's 1.07) is not its record.
PATCH_SECTIONS = {
    "0001": ("Batch invariance", "What the patched kernels cost"),
    "0002": ("What the patched kernels cost", "Attention's prefetch"),
    "0003": ("What the patched kernels cost", "Batch invariance"),
    "0004": ("One-row float products", "Batch invariance"),
    "0005": ("Two threads: a decode step's segments", "Batch invariance"),
    "0006": ("Q4_1 two rows by two", "Batch invariance"),
    "0007": ("libmtmd's model graphs",),
    "0010": ("Audio windows",),
    "0011": ("qwen2vl's RMS norm epsilon",),
    "0012": ("The encoder beside streams",),
    "0013": ("Patch 0013",),
}


def figures(text: str) -> list[str]:
    return FIGURE.findall(NOT_MEASURED.sub(" ", text))


def probe_sections() -> dict[str, str]:
    """RESULTS.md cut at every heading, whatever its level: heading text -> the section's text, heading included."""
    parts = re.split(r"\n(?=#+ )", "\n" + PROBE_RESULTS.read_text())
    return {part.strip().splitlines()[0].lstrip("#").strip(): part for part in parts if part.strip()}


def measured_part(path: Path) -> str:
    """What a patch's header says it measured: its commit message, above the first "---" line, from "Measured"."""
    header = path.read_text().split("\n---\n", 1)[0]
    return header[header.find("Measured"):] if "Measured" in header else ""


def test_every_figure_a_patch_header_measured_is_recorded_in_its_section() -> None:
    """patches/README.md: what each patch's header says it measured is in bench/probes/RESULTS.md, in the section
    where the probe, the machine and the date are."""
    sections = probe_sections()
    measured = {path.name[:4]: measured_part(path) for path in sorted(PATCHES.glob("*.patch"))}
    assert len(measured) >= 12
    assert PATCH_SECTIONS.keys() == {number for number, text in measured.items() if text}
    for number, starts in PATCH_SECTIONS.items():
        found = [[heading for heading in sections if heading.startswith(start)] for start in starts]
        assert all(len(headings) == 1 for headings in found), (number, found)
        recorded = set(figures("\n".join(sections[headings[0]] for headings in found)))
        missing = [figure for figure in figures(measured[number]) if figure not in recorded]
        assert not missing, f"{number}: {missing} are not in its sections of bench/probes/RESULTS.md, {starts}"


# The GPU loans: docs/backends.md's per-loan table (each loan's raw figures, one run each, the raw results taken
# off the lent machine in its reports) is the record its latest-loan ratios come from; the README quotes none.
BACKENDS = REPO / "docs" / "backends.md"
LOAN_COLUMNS = ("llm-worker exact", "llm-worker fast", "llama-server")


def gpu_loans() -> list[dict[str, tuple[float | None, ...]]]:
    """Each loan's row: per server, (1-stream tok/s, 8-stream tok/s, prefill ms or None)."""
    text = BACKENDS.read_text().split("| loan | commit | " + " | ".join(LOAN_COLUMNS) + " |", 1)[1]
    loans = []
    for line in text.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert re.fullmatch(r"[0-9a-f]{7}", cells[1]), line
        loans.append({server: tuple(float(n) for n in quoted(cell)) + (None,) * (3 - len(quoted(cell)))
                      for server, cell in zip(LOAN_COLUMNS, cells[2:])})
    return loans


def latest_loan_ratios(mode: str) -> list[str]:
    """One mode's ratios to llama-server on the latest loan, as the pages write them: one stream, 8 streams, the
    prefill. Never a range across loans: each ran at its own commit."""
    loan = gpu_loans()[-1]
    return [f"{loan[mode][figure] / loan['llama-server'][figure]:.2f}" for figure in range(3)]


def test_the_gpu_ratios_come_from_the_latest_loan():
    """docs/backends.md quotes the latest loan's ratios (one loan, one commit); the README quotes none, only what every
    loan's row shows: both modes decoded 8 streams slower than llama-server."""
    assert len(gpu_loans()) == 5
    assert "both modes decoded 8\nstreams slower than llama-server" in (REPO / "README.md").read_text()
    for loan in gpu_loans():
        assert all(loan[mode][1] < loan["llama-server"][1] for mode in ("llm-worker exact", "llm-worker fast")), loan
    docs = " ".join(BACKENDS.read_text().split("Against that loan's llama-server, the latest loan", 1)[1][:300]
                    .split())
    assert re.findall(r"(\d\.\d\d)x", docs)[:6] == latest_loan_ratios("llm-worker exact") + latest_loan_ratios(
        "llm-worker fast"), docs


def latest_commit() -> str:
    text = BACKENDS.read_text().split("| loan | commit | " + " | ".join(LOAN_COLUMNS) + " |", 1)[1]
    rows = itertools.takewhile(lambda line: line.startswith("|"), text.splitlines()[2:])
    return [row.split("|")[2].strip() for row in rows][-1]
