"""The published comparison tables, written from the committed runs (bench/results/summaries/), never typed: the
README's short comparison (README_ROWS) and docs/benchmarks.md's whole one (ROWS), its exact-mode first-token table,
its throughput tables, GuideLLM's and the embeddings table, each between its markers.

A README row names its run and, per column, the server whose figures it quotes and how (a format string over the
figures: `w` llm-worker's, `s` llama-server's, `p` llama_cpp.server's, `r` llm-worker's over the row's reference,
llama-server's unless the row names another of the run's servers); a column without a server is words. A ratio is
always the quoted figures' ratio, one definition for every table. `--write` puts each table between its markers;
tests/unit/test_published_figures.py fails while a page holds another. A llama-server figure from a run whose peer
was built without our patches (every run before bench/build_llama_server.sh built it from the patched source) is
marked UNPATCHED, and a table holding such a row says what the mark means. Each comparison row gives its run's date
and commit, and the tables' notes the machines; `--stale` lists the runs whose commit's measured code (MEASURED_CODE)
differs from HEAD's, and the files: a reader with a clone sees which rows measured other code than the checkout's.
Run: .venv/bin/python bench/tables.py [--write | --stale]
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUMMARIES = REPO / "bench" / "results" / "summaries"
END = "<!-- /table -->"
HEADER = "| | llm-worker | llama-server | llama_cpp.server | from |\n|---|---|---|---|---|"
UNPATCHED = " †"
UNPATCHED_NOTE = "† llama-server built without our patches: its Q4_1 figures also measure patch 0006."
# What a run measured besides the bench: the worker, the patch series, the llama.cpp pin and how it is built.
MEASURED_CODE = ("worker", "patches", "pyproject.toml", "scripts/build-llama-cpp")
# A run's peak RSS less its model file: what a server holds beside the weights.
RSS_LESS_MODEL = "peak_rss_less_model_mb"


@dataclass(frozen=True)
class Column:
    text: str  # a format string over w, s, p, r and `best`; words where it quotes no server
    server: str | None = None  # the run's name for the server quoted
    # Or, instead, the one of these servers whose figure `by` was highest in the run, its name less "llama-server " as
    # `best`: a peer's best configuration, whichever it was that run (a fixed one could quote its weaker).
    best_of: tuple[str, ...] = ()
    by: str = ""

    def quoted(self, servers: dict[str, Any]) -> str | None:
        """The server this column quotes in a run with these servers' figures."""
        if self.best_of:
            return max(self.best_of, key=lambda name: servers[name][self.by])
        return self.server


@dataclass(frozen=True)
class Row:
    label: str
    run: str  # a summary's name under bench/results/summaries/
    cells: tuple[Column, Column, Column]  # llm-worker, llama-server, llama_cpp.server
    link: str
    reference: str = ""  # the server llm-worker's ratios are to: the llama-server column's, unless named

    def reference_server(self) -> str | None:
        return self.reference or self.cells[1].server


W, S, P = "llm-worker", "llama-server", "llama_cpp.server"
EXACT = "llm-worker exact no drafts"  # drafts off on both sides (docs/benchmarks.md's first rule)
NONE = Column("")
RESULTS = "[bench/RESULTS.md](bench/RESULTS.md)"
DRAFTS = "[bench/RESULTS-DRAFTS.md](bench/RESULTS-DRAFTS.md)"


EIGHT_CLIENTS = ("{{{key}[128x8][ttft_p50_ms]:,.0f}} / {{{key}[128x8][ttft_p99_ms]:,.0f}} ms; "
                 "{{{key}[128x8][itl_p99_ms]:,.0f}} ms; {{{key}[128x8][itl_max_ms]:,.0f}} ms")


def tok_s(level: str, run_link: str, label: str, run: str, third: Column) -> Row:
    return Row(label, run, (Column(f"{{w[{level}][agg_tok_s]:.1f}} ({{r[{level}][agg_tok_s]:.2f}}x)", W),
                            Column(f"{{s[{level}][agg_tok_s]:.1f}}", S), third), run_link)


def bench_link(name: str) -> str:
    return f"[bench/{name}]({'bench/' + name})"


ROWS = (
    tok_s("128x1", RESULTS, "tok/s, 1 client, drafts off", "throughput-drafts-off",
          Column("{p[128x1][agg_tok_s]:.1f}", P)),
    tok_s("128x8", RESULTS, "tok/s, 8 clients, drafts off", "throughput-drafts-off",
          Column("{p[128x8][agg_tok_s]:.1f}", P)),
    tok_s("128x1", DRAFTS, "tok/s, 1 client, drafts on", "throughput-drafts-on", Column("has none")),
    tok_s("128x8", DRAFTS, "tok/s, 8 clients, drafts on", "throughput-drafts-on", Column("has none")),
    Row("8 clients, drafts off: time to first token p50 / p99; inter-token p99; longest gap",
        "throughput-drafts-off", (Column(EIGHT_CLIENTS.format(key="w"), W), Column(EIGHT_CLIENTS.format(key="s"), S),
                                  Column(EIGHT_CLIENTS.format(key="p"), P)), RESULTS),
    Row("peak RSS less the model, drafts off", "throughput-drafts-off",
        (Column(f"{{w[{RSS_LESS_MODEL}]:,.0f}} MB", W), Column(f"{{s[{RSS_LESS_MODEL}]:,.0f}} MB", S),
         Column(f"{{p[{RSS_LESS_MODEL}]:,.0f}} MB", P)), RESULTS),
    Row("multi-turn chat, late-turn time to first token; wall time", "chat",
        (Column("{w[late TTFT ms]:,.0f} ms; {w[wall s]:.1f} s ({r[wall s]:.2f}x)", EXACT),
         Column("{s[late TTFT ms]:,.0f} ms; {s[wall s]:.1f} s", S),
         Column("{p[late TTFT ms]:,.0f} ms; {p[wall s]:.1f} s", P)), bench_link("CHAT.md")),
    Row("hybrid model (LFM2-1.2B's shape, Q4_K_M), multi-turn chat: late-turn TTFT; wall", "chat-hybrid",
        (Column("{w[late TTFT ms]:,.0f} ms ({r[late TTFT ms]:.2f}x); {w[wall s]:.1f} s ({r[wall s]:.2f}x)", EXACT),
         Column("{s[late TTFT ms]:,.0f} ms; {s[wall s]:.1f} s", S), NONE), bench_link("CHAT-HYBRID.md")),
    Row("prompt tokens reused a late turn", "chat",
        (Column("{w[late cached tokens]:.0f} of {w[late prompt tokens]:.0f}", EXACT),
         Column("{s[late cached tokens]:.0f} of {s[late prompt tokens]:.0f}", S),
         Column("none: no cache between requests")), bench_link("CHAT.md")),
    Row("8 conversations on 4 slots, late-turn TTFT (`--cache-ram`)", "chat-8-on-4",
        (Column("{w[late TTFT ms]:,.0f} ms ({r[late TTFT ms]:.2f}x)", EXACT),
         Column("{s[late TTFT ms]:,.0f} ms", S), NONE), bench_link("CHAT-8-ON-4.md")),
    Row("8 returning ~1,500-token conversations after a restart, first-turn TTFT (`--kv-dir`)", "restart",
        (Column("{w[warm (--kv-dir)][ttft_mean_ms]:,.0f} ms; cold restart "
                "{w[cold (no --kv-dir)][ttft_mean_ms]:,.0f} ms (one run)", W),
         Column("its slot files, saved and restored by hand"), NONE), bench_link("RESTART.md")),
    Row("two LoRA adapters alternating over 8 streams, per-request `lora`, tok/s", "lora",
        (Column("{w[two, alternating][tok_s]:.1f} ({r[two, alternating][tok_s]:.2f}x)", W),
         Column("{s[two, alternating][tok_s]:.1f}", S), NONE), bench_link("LORA.md")),
    Row("a one-image chat (SigLIP-base's encoder, 576 image tokens), first token; the same image next turn", "images",
        (Column("{w[first_ms]:,.0f} ms; {w[second_ms]:,.0f} ms", W),
         Column("{s[first_ms]:,.0f} ms; {s[second_ms]:,.0f} ms (`--mmproj`)", S), NONE), bench_link("IMAGES.md")),
    Row("4 requests at once with one new shared prompt, a burst's wall time", "burst",
        (Column("{w[burst_wall_s]:.2f} s ({r[burst_wall_s]:.2f}x)", W), Column("{s[burst_wall_s]:.2f} s", S), NONE),
        bench_link("BURST.md")),
    Row("decode under a JSON schema, 1 stream", "structured",
        (Column("{w[json_schema][decode tok/s]:.1f} tok/s ({r[json_schema][decode tok/s]:.2f}x)", EXACT),
         Column("{s[json_schema][decode tok/s]:.1f} tok/s", S), NONE), bench_link("STRUCTURED.md")),
    Row("GuideLLM 0.8.1 (an outside client), 8 streams: output tok/s; inter-token ms (both means); TTFT p50",
        "guidellm",
        (Column("{w[8 streams][output_tok_s]:.1f} ({r[8 streams][output_tok_s]:.2f}x); "
                "{w[8 streams][itl_mean_ms]:.0f} ms; {w[8 streams][ttft_p50_ms]:,.0f} ms", W),
         Column("{s[8 streams][output_tok_s]:.1f}; {s[8 streams][itl_mean_ms]:.0f} ms; "
                "{s[8 streams][ttft_p50_ms]:,.0f} ms", S), NONE), bench_link("GUIDELLM.md")),
    Row("decode with n-gram drafts, answers that copy the prompt, 1 stream", "speculative",
        (Column("{w[copying, 1 stream]:.1f} tok/s ({r[copying, 1 stream]:.2f}x without drafts)", "llm-worker ngram"),
         Column("{s[copying, 1 stream]:.1f} tok/s ({best}, its best)",
                best_of=("llama-server ngram-simple", "llama-server ngram-map-k"), by="copying, 1 stream"), NONE),
        bench_link("SPECULATIVE.md"), reference="llm-worker none"),
)

# The README's short table: the rows a person choosing a server asks first, where the worker trails as where it
# leads (one stream and eight, their latency, memory, chat on two models, an outside client). docs/benchmarks.md has
# every row.
README_ROWS = (
    "tok/s, 1 client, drafts off", "tok/s, 8 clients, drafts off",
    "8 clients, drafts off: time to first token p50 / p99; inter-token p99; longest gap",
    "peak RSS less the model, drafts off", "multi-turn chat, late-turn time to first token; wall time",
    "hybrid model (LFM2-1.2B's shape, Q4_K_M), multi-turn chat: late-turn TTFT; wall",
    "GuideLLM 0.8.1 (an outside client), 8 streams: output tok/s; inter-token ms (both means); TTFT p50",
)


def summary(name: str) -> dict[str, Any]:
    """A committed run, each server's figures with its peak RSS less the model where the run measured RSS."""
    run = json.loads((SUMMARIES / f"{name}.json").read_text())
    for figures in run["servers"].values():
        if isinstance(figures.get("peak_rss_mb"), (int, float)):
            figures[RSS_LESS_MODEL] = figures["peak_rss_mb"] - run["model_mb"]
    return run


def peer_mark(run: dict[str, Any]) -> str:
    """UNPATCHED where the run's llama-server had none of our patches: its summary names no patch set."""
    return "" if run.get("llama_server_patches") else UNPATCHED


def ratios(ours: Any, theirs: Any) -> Any:
    """ours / theirs at every figure both have, in the figures' own nesting."""
    if isinstance(ours, dict):
        return {key: ratios(value, theirs[key]) for key, value in ours.items() if key in theirs}
    return ours / theirs if isinstance(ours, (int, float)) and theirs else None


def render_row(row: Row, root: str = "") -> str:
    """The row as a table line, its links relative to a page in `root` ("../" for docs/)."""
    run = summary(row.run)
    servers = run["servers"]
    quoted = {name: column.quoted(servers) for name, column in zip("wsp", row.cells)}
    figures = {name: servers[server] for name, server in quoted.items() if server}
    reference = row.reference_server()
    if "w" in figures and reference:
        figures["r"] = ratios(figures["w"], servers[reference])
    best = (quoted["s"] or "").removeprefix(f"{S} ")
    cells = [column.text.format(**figures, best=best) for column in row.cells]
    if quoted["s"]:
        cells[1] += peer_mark(run)
    link = row.link.replace("](bench/", f"]({root}bench/")
    parts = [row.label, *cells, f"{link} {run['date']} `{run['commit'][:7]}`"]
    return "|" + "|".join(f" {part} " if part else " " for part in parts) + "|"


def machines_note(names: list[str]) -> str:
    """Which machine ran which rows' runs: the most common one, then each other with its runs."""
    machine = {name: summary(name)["machine"].replace("(R)", "") for name in dict.fromkeys(names)}
    (usual, _), *others = Counter(machine.values()).most_common()
    exceptions = "; ".join(f"{other}: {', '.join(name for name in machine if machine[name] == other)}"
                           for other, _ in others)
    return f"Runs on an {usual}" + (f", but {exceptions}." if exceptions else ".")


def _comparison(rows: list[Row], root: str) -> str:
    """A comparison table, then its note: the machines, and the mark's meaning where a row carries it."""
    lines = [render_row(row, root) for row in rows]
    marked = any(UNPATCHED in line for line in lines)
    note = " ".join([machines_note([row.run for row in rows]), *([UNPATCHED_NOTE] if marked else [])])
    return "\n".join([HEADER, *lines, "", note])


def readme() -> str:
    """The README's short comparison: README_ROWS of ROWS."""
    return _comparison([row for row in ROWS if row.label in README_ROWS], "")


def comparison() -> str:
    """docs/benchmarks.md's comparison: every row."""
    return _comparison(list(ROWS), "../")


def changed_since(commit: str) -> list[str]:
    """The files of MEASURED_CODE that differ between `commit` and HEAD."""
    return subprocess.run(["git", "diff", "--name-only", commit, "HEAD", "--", *MEASURED_CODE], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout.split()


# docs/benchmarks.md's "Exact mode's first token": a column per weight type (its run), a row per prompt length, each
# cell llm-worker's time to first token against llama-server's, seconds.
FIRST_TOKEN_RUNS = {"test model Q4_1": "first-token-q4_1", "Q4_K_M": "first-token-q4_k_m", "F16": "first-token-f16"}
FIRST_TOKEN_LEVELS = {"1,536-token prompt": "1536x1", "6,144-token prompt": "6144x1"}


def first_token() -> str:
    runs = {column: summary(name) for column, name in FIRST_TOKEN_RUNS.items()}
    lines = ["| time to first token | " + " | ".join(runs) + " |", "|---" * (1 + len(runs)) + "|"]
    for label, level in FIRST_TOKEN_LEVELS.items():
        cells = []
        for run in runs.values():
            ours, theirs = (run["servers"][name][level]["ttft_p50_ms"] / 1000 for name in (W, S))
            cells.append(f"{ours:.2f} s vs {theirs:.2f} s{peer_mark(run)} ({ours / theirs:.2f}x)")
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


# docs/benchmarks.md's "Throughput and latency": a row per drafts setting and client count, then its targets.
THROUGHPUT_RUNS = {"drafts off": "throughput-drafts-off", "drafts on": "throughput-drafts-on"}
THROUGHPUT_LEVELS = {"1": "128x1", "8": "128x8"}


def _each_round(run: dict[str, Any], peer: str, level: str, figure: str = "agg_tok_s") -> str:
    kept = run.get("round_ratios", {}).get(peer, {}).get(level)
    return ", ".join(f"{r:.2f}x" for r in kept[figure]) if kept else "not kept"


def throughput() -> str:
    lines = ["| 128-token prompts | clients | llm-worker tok/s | llama-server tok/s | llama_cpp.server tok/s | "
             "each round's ratio to llama-server | llm-worker TTFT p50 | llama-server TTFT p50 | "
             "llm-worker ITL p50 / p99 / longest | llama-server ITL p50 / p99 / longest |", "|---" * 10 + "|"]
    for drafts, name in THROUGHPUT_RUNS.items():
        run = summary(name)
        servers = run["servers"]
        for clients, level in THROUGHPUT_LEVELS.items():
            w, s = servers[W][level], servers[S][level]
            third = f"{servers[P][level]['agg_tok_s']:.1f}" if P in servers else ""
            lines.append(f"| {drafts} | {clients} | {w['agg_tok_s']:.1f} | {s['agg_tok_s']:.1f}{peer_mark(run)} | "
                         f"{third} | "
                         f"{_each_round(run, S, level)} | {w['ttft_p50_ms']:.0f} ms | {s['ttft_p50_ms']:.0f} ms | "
                         f"{w['itl_p50_ms']:.1f} / {w['itl_p99_ms']:.0f} / {w['itl_max_ms']:,.0f} ms | "
                         f"{s['itl_p50_ms']:.1f} / {s['itl_p99_ms']:.0f} / {s['itl_max_ms']:,.0f} ms |")
    return "\n".join(lines)


def throughput_targets() -> str:
    run = summary("throughput-drafts-off")
    servers = run["servers"]
    w, s, p = servers[W], servers[S], servers[P]
    peer_rounds = run.get("round_ratios", {}).get(P, {}).get("128x8")
    spread = (f" (rounds {min(peer_rounds['agg_tok_s']):.2f}-{max(peer_rounds['agg_tok_s']):.2f} ×)"
              if peer_rounds else "")
    targets = [
        ("single-stream decode tok/s ≥ 0.95 × llama-server",
         w["128x1"]["decode_tok_s_p50"] / s["128x1"]["decode_tok_s_p50"], 0.95,
         " × (its decode tok/s per stream, p50)", True),
        ("aggregate tok/s at 8 streams ≥ 1.0 × llama-server", w["128x8"]["agg_tok_s"] / s["128x8"]["agg_tok_s"], 1.0,
         " ×", True),
        ("aggregate tok/s at 8 streams ≥ 3 × llama_cpp.server", w["128x8"]["agg_tok_s"] / p["128x8"]["agg_tok_s"], 3.0,
         f" ×{spread}", True),
        ("TTFT p50 at 8 streams ≤ 1.1 × llama-server", w["128x8"]["ttft_p50_ms"] / s["128x8"]["ttft_p50_ms"], 1.1,
         " ×", False),
    ]
    lines = ["| target (drafts off on every server, medians of 3 rounds) | measured | met |", "|---|---|---|"]
    for label, value, bound, words, higher in targets:
        met = value >= bound if higher else value <= bound
        lines.append(f"| {label} | {value:.2f}{words} | {'yes' if met else '**no**'} |")
    rss = w[RSS_LESS_MODEL]
    lines.append(f"| worker RSS minus model size ≤ 150 MB | {rss:.0f} MB (llama-server: {s[RSS_LESS_MODEL]:.0f} MB) | "
                 f"{'yes' if rss <= 150 else '**no**'} |")
    return "\n".join(lines)


# docs/benchmarks.md's "An outside client": GuideLLM's figures per level, llm-worker against llama-server.
GUIDELLM_FIGURES = {"output tok/s (mean)": "output_tok_s", "inter-token ms (mean)": "itl_mean_ms",
                    "TTFT ms (p50)": "ttft_p50_ms", "TTFT ms (p99)": "ttft_p99_ms",
                    "request latency s (mean)": "latency_mean_s"}


def guidellm() -> str:
    run = summary("guidellm")
    servers = run["servers"]
    lines = ["| streams | figure | llm-worker | llama-server | ratio |", "|---|---|---|---|---|"]
    for level in servers[W]:
        for label, name in GUIDELLM_FIGURES.items():
            ours, theirs = servers[W][level][name], servers[S][level][name]
            lines.append(f"| {level.split()[0]} | {label} | {ours:,.1f} | {theirs:,.1f}{peer_mark(run)} | "
                         f"{ours / theirs:.2f}x |")
        lines.append(f"| {level.split()[0]} | output tok/s, each round's ratio | | | "
                     f"{_each_round(run, S, level, 'output_tok_s')} |")
    return "\n".join(lines)


# docs/benchmarks.md's "Embeddings": each server's inputs/s both ways and its vectors' least cosine to exact mode's,
# and llm-worker's modes against each llama-server configuration (4 slots, whose vectors upstream's #26282 spoils
# where inputs of several slots share a call, and one slot).
EMBEDDING_FIGURES = {"batched": "batched_inputs_s", "single": "single_inputs_s"}


def embeddings() -> str:
    run = summary("embeddings")
    servers, by_peer = run["servers"], run["round_ratios"]
    lines = ["| server | batched inputs/s | single inputs/s | least cosine to exact's vectors | " +
             " | ".join(f"each round's ratio to {peer}, batched; single" for peer in by_peer) + " |",
             "|---" * (4 + len(by_peer)) + "|"]
    for label, figures in servers.items():
        mark = peer_mark(run) if label.startswith(S) else ""
        cells = [f"{figures[name]:.1f}{mark}" for name in EMBEDDING_FIGURES.values()]
        cells.append(f"{figures['least_cosine']:.4f}")
        cells += ["; ".join(", ".join(f"{r:.2f}x" for r in ratios[label][name]) for name in EMBEDDING_FIGURES.values())
                  if label in ratios else "" for ratios in by_peer.values()]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Published:
    page: Path
    render: Callable[[], str]

    @property
    def begin(self) -> str:
        return f"<!-- table: bench/tables.py {self.render.__name__} -->"

    def written(self) -> str:
        """The table between its markers."""
        return "\n".join([self.begin, self.render(), END])

    def held(self) -> str:
        """What the page holds between the markers, the markers included."""
        text = self.page.read_text()
        start = text.index(self.begin)
        return text[start:text.index(END, start) + len(END)]

    def write(self) -> None:
        self.page.write_text(self.page.read_text().replace(self.held(), self.written()))


BENCHMARKS = REPO / "docs" / "benchmarks.md"
TABLES = (Published(REPO / "README.md", readme), Published(BENCHMARKS, comparison), Published(BENCHMARKS, first_token),
          Published(BENCHMARKS, throughput),
          Published(BENCHMARKS, throughput_targets), Published(BENCHMARKS, guidellm), Published(BENCHMARKS, embeddings))


def main() -> None:
    if sys.argv[1:] == ["--stale"]:
        for name in dict.fromkeys(row.run for row in ROWS):
            commit = summary(name)["commit"]
            if changed := changed_since(commit):
                print(f"{name}: measured at {commit}; {len(changed)} files differ since: {' '.join(changed)}")
        return
    for table in TABLES:
        if sys.argv[1:] == ["--write"]:
            table.write()
        else:
            print(table.written())


if __name__ == "__main__":
    main()
