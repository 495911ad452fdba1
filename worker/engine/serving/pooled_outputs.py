"""Embeddings and rerank scores through the engine: inputs tokenized and checked here, pooled on the engine
thread between generation steps (pooling/embeddings.py), or, for a reranker without a rank head, its yes/no logits
from ordinary one-token generations (pooling/rerank.py)."""

from __future__ import annotations

from worker.engine.engine import Engine
from worker.engine.pooling.embeddings import EMBEDDINGS, RANK, Vector, check_inputs
from worker.engine.pooling.rerank import (
    EMPTY_THINKING,
    RANK_HEAD,
    YES_NO,
    Reranker,
    filled,
    relevance_messages,
    yes_no_scores,
)
from worker.engine.requests import Chat
from worker.engine.serving.prompts import Prompts


class PooledOutputs:
    def __init__(self, engine: Engine, prompts: Prompts) -> None:
        self._engine = engine
        self._model = engine.model
        self._prompts = prompts
        self.reranker = self._reranker()

    @property
    def pooling(self) -> str | None:
        """How /v1/embeddings pools a vector per input: mean, cls or last; None: started without --embeddings."""
        return self._model.pooling

    @property
    def embedding_width(self) -> int:
        return self._model.n_embd

    def _reranker(self) -> Reranker | None:
        """How this model scores documents for /v1/rerank (pooling/rerank.py); None: it cannot (no single "yes"
        and "no" tokens in its vocabulary, and no rank head)."""
        model = self._model
        template = model.chat_template("rerank")
        if model.ranking is not None:
            return Reranker(RANK_HEAD, model.ranking.n_batch, template)
        yes, no = (model.tokenize(word, add_special=False, parse_special=False) for word in ("yes", "no"))
        if len(yes) != 1 or len(no) != 1:
            return None
        return Reranker(YES_NO, model.n_ctx_seq, template, (yes[0], no[0]))

    def rerank_tokens(self, reranker: Reranker, query: str, document: str) -> list[int]:
        """One document's prompt: the GGUF's rerank template filled in, llama-server's pair for a rank head, or
        the relevance question through the chat template. Reads only the vocab and the template: any thread."""
        if reranker.template is not None:
            return self._model.tokenize(filled(reranker.template, query, document), add_special=False)
        if reranker.route == RANK_HEAD:
            return self._model.pair_tokens(query, document)
        prompts = self._prompts
        thinking = EMPTY_THINKING if prompts.chat.thinks else ""
        return prompts.tokenize_chat(prompts.chat_text(Chat(tuple(relevance_messages(query, document)))) + thinking)

    async def rerank(self, reranker: Reranker, prompts: list[list[int]], request_id: str) -> list[float]:
        """Each prompt's relevance score (rerank_tokens' prompts, each within reranker.limit tokens).

        Raises loop.QueueFull up front, EmbeddingFailed when a score did not come."""
        if reranker.route == YES_NO:
            return await yes_no_scores(self._engine.submit, prompts, reranker.yes_no, self._model.config.parallel,
                                       request_id)
        return [vector[0] for vector in await self._engine.pooled(RANK, prompts)]

    def tokenize_inputs(self, inputs: list[str | list[int]]) -> list[list[int]]:
        """Embedding inputs: texts as llama-server tokenizes them (BOS and EOS as the vocab asks), token ids as sent."""
        return [self._model.tokenize(item, add_special=True) if isinstance(item, str) else item for item in inputs]

    async def embed(self, inputs: list[list[int]], fields: list[str], constraint: str) -> list[Vector]:
        """Each input's pooled, L2-normalized vector, decoded on the engine thread between generation steps.
        `fields`: where each input is in the body; `constraint`: what an input must be, as the route says it.

        Raises UnfitInputs (a Refused naming those fields) or loop.QueueFull up front, EmbeddingFailed when no
        vectors came.
        """
        if self._model.embedding is None:
            raise RuntimeError("this engine was loaded without embeddings")
        check_inputs(inputs, self._model.embedding.n_batch, fields, constraint)
        return await self._engine.pooled(EMBEDDINGS, inputs)
