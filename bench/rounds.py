"""Rounds alternated between servers (docs/benchmarks.md, "The rules"): every server once a round, the order
reversed every other round, so that a shared machine slowing or speeding up during a run weighs on every server
alike; a figure is the median over the rounds, a ratio is given with each round's."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from typing import TypeVar

from bench.report import ratio

Variant = TypeVar("Variant")


def alternated(variants: Sequence[Variant], rounds: int) -> Iterator[tuple[int, Variant]]:
    """(round, variant) in the order they run: the variants in order, then reversed, and so on."""
    for n in range(rounds):
        yield from ((n, variant) for variant in (variants if n % 2 == 0 else variants[::-1]))


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds' rows (all with the same keys)."""
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def round_ratios(pairs: list[tuple[float, float]]) -> str:
    """The median of each round's ours/theirs ratio, with their range where there are several rounds."""
    return ratios_text([ratio(ours, theirs) for ours, theirs in pairs])


def each_ratio(pairs: list[tuple[float, float]]) -> list[float]:
    """Each round's ours/theirs ratio as a summary keeps it (write_summary's round_ratios)."""
    return [round(ratio(ours, theirs), 4) for ours, theirs in pairs]


def ratios_text(ratios: list[float]) -> str:
    """Rounds' ratios as their median, with their range where there are several."""
    values = sorted(ratios)
    text = f"{statistics.median(values):.2f}x"
    return text if len(values) == 1 else f"{text} ({values[0]:.2f}-{values[-1]:.2f})"
