"""What every bench's report shares: the machine it ran on, number formatting, matplotlib if installed, and
publishing a report (and its chart) into bench/ where docs/benchmarks.md links it."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.config import BENCH_DIR, MB, BenchConfig


def environment(cfg: BenchConfig) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    env: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
                           "python": platform.python_version(), "load_before": os.getloadavg()[0],
                           "commit": source_commit(), "model": cfg.model.name,
                           "model_mb": round(cfg.model.stat().st_size / MB)}
    if env["load_before"] > 0.5:
        # Each server spins all its threads; anything else running skews them unpredictably.
        print(f"warning: load average is {env['load_before']:.1f} before the benchmark; "
              "numbers from a busy machine are not comparable", file=sys.stderr)
    if cfg.llama_server_bin:
        out = subprocess.run([str(cfg.llama_server_bin), "--version"], capture_output=True, text=True, timeout=30)
        env["llama_server_version"] = " ".join((out.stdout + out.stderr).split("\n")[0:2]).strip()
        env["llama_server_patches"] = peer_patches(cfg.llama_server_bin)
    with contextlib.suppress(Exception):
        import llama_cpp

        env["llama_cpp_python"] = llama_cpp.__version__
    return env


def peer_patches(binary: Path) -> str:
    """The hash of the patch set llama-server was built with ("" for none), from what scripts/build-llama-cpp wrote
    beside it; "unknown" for a binary built elsewhere."""
    record = binary.parent / "llm-worker-build"
    if not record.is_file():
        return "unknown"
    fields = dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)
    return fields.get("patches", "unknown")


def peer_build_line(env: dict[str, Any]) -> str:
    """What a report says of the peer's build."""
    patches = env.get("llama_server_patches", "")
    if patches == "":
        return "llama.cpp as upstream ships it, none of our patches"
    if patches == "unknown":
        return "built elsewhere"
    return f"built from the same patched source (patch set {patches}), the batch-invariance switch off"


def fmt(template: str, value: float) -> str:
    return "–" if value != value else template.format(value)


def ratio(a: float, b: float) -> float:
    return a / b if b and b == b and a == a else float("nan")


def machine_line(cfg: BenchConfig, env: dict[str, Any]) -> str:
    """A report's first bullets: the model, the machine, the day and how busy it was when the run began; where the
    run had a llama-server, what it was built from (a figure against a peer without our patches reads otherwise)."""
    model_mb = cfg.model.stat().st_size / MB
    line = (f"- model: `{cfg.model.name}` ({model_mb:.0f} MB); {env.get('cpu', '')}, {env.get('cores')} cores; "
            f"{env.get('date', '')}; load average {env.get('load_before', float('nan')):.1f} at the start")
    if "llama_server_version" in env:
        line += f"\n- llama-server: {env['llama_server_version']}; {peer_build_line(env)}"
    return line


def pyplot() -> Any | None:
    """matplotlib.pyplot drawing to files, or None (with a hint) where matplotlib is not installed: it is optional."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed, so no chart: .venv/bin/pip install matplotlib", file=sys.stderr)
        return None
    return plt


def save_chart(plt: Any, fig: Any, path: Path) -> bool:
    """Lay out the figure, write it to path and free it; True, for the caller's "has a chart"."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def publish(report: str, chart: Path | None, name: str, caption: str) -> None:
    """The report as bench/NAME, and its chart (if drawn) beside it under the chart's own file name."""
    if chart is not None:
        shutil.copyfile(chart, BENCH_DIR / chart.name)
        report += f"\n![{caption}]({chart.name})\n"
    (BENCH_DIR / name).write_text(report)


SUMMARIES = BENCH_DIR / "results" / "summaries"


def source_commit() -> str:
    """The commit the figures' code is at, "+changes" where the tree differs from it in what they depend on: the
    worker, the benches, the build scripts and patches, the pins (not the docs, nor the reports, charts and
    summaries earlier --publish runs rewrite). Taken when a run begins (environment()): an edit made while it runs
    is not in it."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=BENCH_DIR).stdout.strip()
    if not commit:  # a copy of the tree without its history (a lent GPU machine): the commit it was sent from
        return os.environ.get("BENCH_COMMIT", "")
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":/worker", ":/bench",
                                 ":/scripts", ":/patches", ":/pyproject.toml", ":!/bench/*.md", ":!/bench/*.png",
                                 ":!/bench/results"],
                                capture_output=True, text=True, cwd=BENCH_DIR).stdout.strip())
    return commit + ("+changes" if dirty else "")


def write_summary(name: str, env: dict[str, Any], figures: dict[str, Any],
                  round_ratios: dict[str, Any] | None = None, directory: Path = SUMMARIES) -> Path:
    """A published run's figures as bench/results/summaries/NAME.json, committed: the date, the commit (and whether
    the tree had changes), the machine and its load, the command, the patch set the llama-server peer was built with
    (absent in runs before it was recorded, whose peer had none), every server's figures, and where a bench gives
    them, each round's ratios to the peer (what a "median of each round's ratio" is taken from). The README's and
    docs' tables quote these; tests/unit/test_published_figures.py holds them to it. A run on a lent machine writes
    it into its own output (`directory`), to be committed from there."""
    run = {key: env[key] for key in ("drafts", "rounds", "model", "model_mb", "llama_server_patches") if key in env}
    script = Path(sys.argv[0].split()[0]).name  # bench/run.py names its workload in argv[0] too ("run.py chat")
    summary = {"date": env.get("date"), "commit": env.get("commit") or source_commit(),
               "machine": f"{env.get('cpu')}, {env.get('cores')} cores", "load_before": env.get("load_before"),
               "command": " ".join([f"bench/{script}", *sys.argv[1:]]), **run, "servers": figures,
               **({"round_ratios": round_ratios} if round_ratios else {})}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(_nan_as_null(summary), indent=1, allow_nan=False) + "\n")
    return path


def _nan_as_null(value: Any) -> Any:
    """JSON has no NaN (a figure a server did not give): null instead."""
    if isinstance(value, dict):
        return {key: _nan_as_null(item) for key, item in value.items()}
    return None if isinstance(value, float) and value != value else value


def write_report(text: str, out_dir: Path, name: str, published: str | None = None) -> None:
    """Print a report, keep it as OUT/NAME, and as bench/PUBLISHED too where given (--publish)."""
    print(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / name).write_text(text)
    if published is not None:
        publish(text, None, published, "")
