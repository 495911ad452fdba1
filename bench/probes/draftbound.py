"""Probe: the most prompt lookup can gain on bench/speculative.py's prompts, with drafts chosen by an oracle.

Each prompt is answered greedily (up to 200 tokens), one token at a time. Then an oracle replays the answer: at
every step it knows how many tokens of the prompt-lookup proposal (worker/engine/speculative/prompt_lookup.py, up
to --draft-max) the model would accept, and drafts the count that gives the most tokens per second under a
pass-cost table (a step of 1 + d rows costs COSTS at 1 + d rows, interpolated as the worker's PassCosts does). The
ratio of the answer's one-token-a-step time to the oracle's is the ceiling of any drafting rule on this machine: a
real rule guesses the acceptance before the step. Steps where the lookup finds no match at all are counted: those
run one row whatever the rule. COSTS: bench/probes/verifycost.py's table (test model, 2 cores), and the costs the
worker measured while serving the copying answers (rows far into a longer context cost more).
Run: .venv/bin/python bench/probes/draftbound.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from bench.speculative import prompt_sets
from worker.engine.speculative.draft_rule import PassCosts
from worker.engine.speculative.prompt_lookup import TokenHistory

MAX_TOKENS = 200
DRAFT_MAX = 16
COSTS_MS = {
    "verifycost.py (320 cells)": {1: 6.3, 2: 12.4, 4: 18.9, 8: 29.5, 16: 49.0},
    "measured serving copying answers": {1: 6.5, 2: 12.9, 4: 21.5, 8: 27.5, 17: 66.1},
}


def greedy_answers(llm: Llama, prompts: list[str]) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, answer tokens) of each prompt, chat-templated as the worker serves it."""
    template = Jinja2ChatFormatter(llm.metadata["tokenizer.chat_template"], eos_token="", bos_token="")
    answers = []
    for prompt in prompts:
        text = template(messages=[{"role": "user", "content": prompt}]).prompt
        tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
        answer = []
        for token in llm.generate(tokens, temp=0.0, reset=True):
            if llm.token_eos() == token or len(answer) == MAX_TOKENS:
                break
            answer.append(token)
        answers.append((tokens, answer))
    return answers


def oracle(answers: list[tuple[list[int], list[int]]], costs: PassCosts) -> tuple[float, int, int]:
    """The oracle's speed-up over one token a step, the steps where the lookup found nothing, and all tokens."""
    plain = drafted = 0.0
    tokens = unmatched = 0
    for prompt, answer in answers:
        history, i = TokenHistory(prompt), 0
        while i < len(answer):
            proposal, _ = history.proposal(DRAFT_MAX)
            unmatched += not proposal
            right = 0  # how many of the proposal the model would keep: they equal the answer's next tokens
            while right < len(proposal) and i + right + 1 < len(answer) and proposal[right] == answer[i + right]:
                right += 1
            count = max(range(right + 1), key=lambda d: (d + 1) / costs.of_call([(0, 1 + d)]))
            drafted += costs.of_call([(0, 1 + count)])
            for token in answer[i:i + count + 1]:
                history.append(token)
            i += count + 1
        tokens += len(answer)
        plain += len(answer) * costs.of(1)
    return plain / drafted, unmatched, tokens


def main() -> None:
    llm = Llama(str(find_model(None)), n_ctx=4096, n_threads=2, verbose=False)
    for name, prompts in prompt_sets().items():
        answers = greedy_answers(llm, prompts)
        for label, table in COSTS_MS.items():
            costs = PassCosts()
            for rows, ms in table.items():
                costs.observe(rows, ms / 1e3)
            gain, unmatched, tokens = oracle(answers, costs)
            print(f"{name:10s} costs {label:34s} oracle {gain:.2f}x one token a step; "
                  f"{unmatched} of {tokens} tokens from steps with no match")


if __name__ == "__main__":
    main()
