"""A fill-in-the-middle prompt on its way to the engine: the model's FIM tokens around the text before and after the
cursor (worker/engine/serving/infill.py), refused by the field that asked for it where the model has none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.api.problems import InvalidRequest, Problem
from worker.engine import ExtraFile, NoInfill

if TYPE_CHECKING:
    from worker.engine import ServedModel


def infill_prompt(served: ServedModel, field: str, prefix: str, suffix: str, extra: tuple[ExtraFile, ...] = (),
                  prompt: str = "") -> list[int]:
    """`field`: the request's field that asked for infill, named where the model cannot."""
    try:
        return served.prompts.infill(prefix, suffix, extra, prompt)
    except NoInfill as why:
        raise InvalidRequest([Problem(field, "a model with fill-in-the-middle tokens", f"{field}: {why}")]) from None
