#!/usr/bin/env python3
"""The benchmarks' one entry point: bench/run.py WORKLOAD [flags]; bench/run.py WORKLOAD --help lists its flags.

Each workload is a module of bench/ with a main(argv) (and still runs on its own: python bench/WORKLOAD.py).
docs/benchmarks.md lists them with the command that made each table and where --publish writes it.
Flags without a workload name run the throughput workload, as bench/run.py did before it was split.
"""

from __future__ import annotations

import importlib
import signal
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WORKLOADS = ("throughput", "chat", "burst", "structured", "kvflags", "weights", "speculative", "restart", "hostcache",
             "lora", "rerank", "images", "chat_layer", "templates", "guidellm", "embeddings")


def usage() -> str:
    lines = [__doc__.strip(), "", "workloads:"]
    for name in WORKLOADS:
        summary = " ".join((importlib.import_module(f"bench.{name}").__doc__ or "").strip().split("\n\n", 1)[0].split())
        lines.append(textwrap.fill(summary, 110, initial_indent=f"  {name:<11} ", subsequent_indent=" " * 14,
                                   break_on_hyphens=False))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if not argv[0].startswith("-") and argv[0] not in WORKLOADS:
        print(f"unknown workload {argv[0]!r}; choose from {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    name, rest = (argv[0], argv[1:]) if argv[0] in WORKLOADS else ("throughput", argv)
    # SIGTERM (e.g. from `timeout`) must unwind like Ctrl-C so the servers get stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.argv[0] = f"{sys.argv[0]} {name}"  # so each workload's usage line reads `run.py NAME ...`
    return importlib.import_module(f"bench.{name}").main(rest)


if __name__ == "__main__":
    sys.exit(main())
