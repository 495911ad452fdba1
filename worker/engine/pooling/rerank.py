"""Reranking: how relevant each document is to a query, as the served model judges it, by one of two routes: a rank
GGUF's classification head, or any other model asked Qwen3-Reranker's yes/no question (docs/models.md, "Reranking")."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from worker.engine.errors import EmbeddingFailed
from worker.engine.handle import RequestHandle
from worker.engine.requests import FinishReason, Request, Scored

# The routes. rank: a GGUF whose `<arch>.pooling_type` is rank carries a classification head, which llama.cpp's rank
# pooling runs in a pooled context of its own, fed between generation steps as embeddings are (embeddings.py); the
# score is the head's first output, as llama-server reports it. yes-no: every other model, asked JUDGE and INSTRUCT
# through its own chat template and scored p(yes) over {yes, no} (relevance(), yes_no_scores()).
RANK_HEAD, YES_NO = "rank", "yes-no"
# Qwen3-Reranker's model card, word for word (llama.cpp's conversion writes the same into its rerank template).
JUDGE = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
         'Note that the answer can only be "yes" or "no".')
INSTRUCT = "Given a web search query, retrieve relevant passages that answer the query"
EMPTY_THINKING = "<think>\n\n</think>\n\n"  # the recipe's answer opens with it on a model that thinks


@dataclass(frozen=True)
class Reranker:
    """How this model scores (query, document) pairs."""

    route: str  # RANK_HEAD or YES_NO
    limit: int  # the most tokens one document's prompt may hold: the rank context's batch, or a slot's context
    # The GGUF's rerank template (tokenizer.chat_template.rerank, with {query} and {document}), if it has one, on
    # either route; a rank model without one gets llama-server's [BOS] query [EOS] [SEP] document [EOS].
    template: str | None
    yes_no: tuple[int, int] = (-1, -1)  # the yes-no route's tokens

    @property
    def limited_by(self) -> str:
        """What sets `limit`, as a refusal names it."""
        return ("the rank context (--ubatch-size)" if self.route == RANK_HEAD
                else "a slot's context (--ctx-size / --parallel)")


def relevance_messages(query: str, document: str) -> list[dict[str, str]]:
    """The recipe's question as a conversation, for the model's own chat template."""
    return [{"role": "system", "content": JUDGE},
            {"role": "user", "content": f"<Instruct>: {INSTRUCT}\n<Query>: {query}\n<Document>: {document}"}]


def filled(template: str, query: str, document: str) -> str:
    """A rerank template with the pair written in, as llama-server fills it."""
    return template.replace("{query}", query).replace("{document}", document)


def relevance(logits: tuple[float, ...]) -> float:
    """p(yes) over {yes, no} from their logits: sigmoid(yes - no), what Qwen3-Reranker's head computes, in a form
    that cannot overflow."""
    margin = logits[0] - logits[1]
    if margin >= 0:
        return 1.0 / (1.0 + math.exp(-margin))
    odds = math.exp(margin)
    return odds / (1.0 + odds)


async def yes_no_scores(submit: Callable[[Request], RequestHandle], prompts: list[list[int]],
                        yes_no: tuple[int, int], window: int, request_id: str) -> list[float]:
    """Each prompt's relevance, as prompt-only requests of the engine, at most `window` queued or running at once
    (more would only wait, and fill the queue other requests need). EmbeddingFailed if one got no score.
    Each is prefilled in exact mode's chunks beside generation, within the prefill budget that keeps streams moving
    (core/scheduler.py), its query prefix copied from the slot that prefilled it first (kv/prefix_cache.py): a score
    is bitwise the same whatever runs beside it."""
    admitted = asyncio.Semaphore(window)

    async def one(tokens: list[int]) -> float:
        async with admitted:
            handle = submit(Request(tokens, 0, request_id=request_id, score_tokens=yes_no))
            scored = None
            try:
                async for event in handle:
                    if isinstance(event, Scored):
                        scored = event.logits
            finally:
                handle.cancel()
        finished = handle.finished
        if scored is None:
            reason = finished.reason if finished else FinishReason.CANCELLED
            raise EmbeddingFailed(finished.message if finished and finished.message else f"scoring ended: {reason}",
                                  stopped=reason is FinishReason.CANCELLED)
        return relevance(scored)

    tasks = [asyncio.ensure_future(one(tokens)) for tokens in prompts]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:  # one failed, or the caller went away: the others stop too
            task.cancel()
