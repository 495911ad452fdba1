"""Reasoning budgets as each API asks for them (docs/agents-and-evals.md, "Reasoning budgets") -> the sampling's
reasoning_budget: tokens of thinking, after which the engine writes the end-of-thinking marker
(worker/engine/core/token_output.py) and the answer follows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from worker.api.problems import Reader
from worker.engine import SamplingParams

if TYPE_CHECKING:
    from worker.engine import ServedModel

# OpenAI's effort levels as thinking budgets, in tokens: none answers at once; the others roughly double the
# thinking a step, from what a quick check needs to what a hard problem does.
EFFORT_BUDGETS = {"none": 0, "minimal": 256, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768}
ANTHROPIC_MIN_BUDGET = 1024  # Anthropic's own minimum for thinking.budget_tokens
THINKING_TYPES = ("enabled", "disabled", "adaptive")
_EFFORTS = ", ".join(EFFORT_BUDGETS)


def thinks(served: ServedModel) -> bool:
    """The model's chat template writes reasoning (llama.cpp finds its tags), so a budget can end it."""
    return served.prompts.thinks


def effort_budget(r: Reader, sampling: SamplingParams) -> SamplingParams:
    """OpenAI's reasoning_effort as the budget it stands for; it and reasoning_budget are two ways to say one thing.

    A model that does not think keeps within any budget: the effort is accepted and bounds nothing."""
    effort = r.body.get("reasoning_effort")
    if effort is None:
        return sampling
    if not isinstance(effort, str) or effort not in EFFORT_BUDGETS:
        r.problem("reasoning_effort", f"one of {_EFFORTS}", f"reasoning_effort must be one of {_EFFORTS}", effort)
        return sampling
    if r.body.get("reasoning_budget") is not None:
        r.problem("reasoning_effort", "reasoning_effort or reasoning_budget, not both",
                  "send reasoning_effort or reasoning_budget: both set the thinking budget", effort)
        return sampling
    return replace(sampling, reasoning_budget=EFFORT_BUDGETS[effort])


def thinking_budget(r: Reader, sampling: SamplingParams, max_tokens: Any, model_thinks: bool) -> SamplingParams:
    """Anthropic's thinking: enabled with budget_tokens, disabled (a budget of 0), or adaptive (the model's own)."""
    thinking = r.body.get("thinking")
    if thinking is None:
        return sampling
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in THINKING_TYPES:
        r.problem("thinking", '{"type": "enabled", "budget_tokens"}, {"type": "disabled"} or {"type": "adaptive"}',
                  "thinking.type must be enabled (with budget_tokens), disabled or adaptive", thinking)
        return sampling
    if kind == "adaptive":  # the model decides how long to think, within its models.toml budget if one is set
        return sampling
    if kind == "disabled":
        return replace(sampling, reasoning_budget=0)
    nested = Reader(thinking)
    budget = nested.number("budget_tokens", required=True, low=ANTHROPIC_MIN_BUDGET, high=2**31 - 1, integer=True)
    for problem in nested.problems:
        r.problem(f"thinking.{problem.field}", problem.constraint, f"thinking.{problem.message}", problem.value)
    if not model_thinks:
        r.problem("thinking", "a model that thinks", "this model does not think (llama.cpp finds no reasoning in its "
                  "chat template): it has no thinking to budget: send no thinking, or serve a thinking model", thinking)
    elif budget is not None and isinstance(max_tokens, int) and budget >= max_tokens:
        r.problem("thinking.budget_tokens", "budget_tokens < max_tokens", f"thinking.budget_tokens ({budget}) must "
                  f"be below max_tokens ({max_tokens}): the answer comes after the thinking", budget)
    return replace(sampling, reasoning_budget=budget) if budget is not None else sampling
