"""POST /v1/rerank and /rerank: each document's relevance to a query, best first, in the Jina/Cohere shape llama-server
and vLLM answer (docs/api.md, "Reranking"); here, not in openai/, as OpenAI has no rerank API. How the model scores
(a rank head, or its own yes/no logits): worker/engine/pooling/rerank.py.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from worker.api.error_shapes import Failure, Family, pooled_failure, response
from worker.api.problems import InvalidRequest, Problem, Reader, parse_json_object
from worker.api.request_checks import served_model
from worker.api.state import WORKER
from worker.engine import EmbeddingFailed
from worker.problem import MAX_LISTED

routes = web.RouteTableDef()
log = structlog.get_logger("worker.request")

MAX_DOCUMENTS = 1000  # per request, as Cohere's

NO_RERANK = Failure(404, "rerank_unsupported", [Problem(
    "worker", "a reranker or a vocabulary with yes and no", "this model cannot rerank: it has no rank head "
    "(pooling_type rank) and its vocabulary has no single \"yes\" and \"no\" tokens to score with")])


@dataclass(frozen=True)
class RerankRequest:
    model: str | None
    query: str
    documents: list[str]
    top_n: int | None  # None: every document
    return_documents: bool


def _documents(r: Reader) -> list[str]:
    """`documents`: strings, or Cohere's and Jina's {"text": ...} objects."""
    raw = r.body.get("documents")
    shape = "a non-empty list of strings or {text} objects"
    if not isinstance(raw, list) or not raw:
        message = "documents is required" if raw is None else "documents must be a non-empty list of documents"
        r.problem("documents", shape, message, raw if not isinstance(raw, list) else len(raw))
        return []
    if len(raw) > MAX_DOCUMENTS:
        r.problem("documents", f"at most {MAX_DOCUMENTS} documents",
                  f"documents has {len(raw)} documents; at most {MAX_DOCUMENTS} are scored in one request", len(raw))
        return []
    texts = []
    for i, item in enumerate(raw):
        text = item.get("text") if isinstance(item, dict) and set(item) == {"text"} else item
        if not isinstance(text, str):
            r.problem(f"documents[{i}]", shape, f"documents[{i}] must be a string or {{\"text\": string}}", item)
        texts.append(text if isinstance(text, str) else "")
    return texts


def parse_rerank(body: dict[str, Any]) -> RerankRequest:
    r = Reader(body)
    model = r.string("model")
    query = r.string("query", required=True, min_length=1)
    documents = _documents(r)
    top_n = r.number("top_n", None, low=1, integer=True, nullable=True)
    return_documents = r.boolean("return_documents")
    r.done()
    return RerankRequest(model, query, documents, top_n, return_documents)


def _too_long(lengths: list[int], limit: int, where: str) -> InvalidRequest:
    problems = [Problem(f"documents[{i}]", f"at most {limit} tokens with the query",
                        f"documents[{i}] makes a {n}-token prompt with the query; at most {limit} fit {where}, and a "
                        "document is never cut: split it", n)
                for i, n in enumerate(lengths) if n > limit]
    if len(problems) > MAX_LISTED:
        more = len(problems) - MAX_LISTED
        problems = [*problems[:MAX_LISTED], Problem("documents", f"at most {limit} tokens with the query",
                                                    f"and {more} more documents over {limit} tokens", more)]
    return InvalidRequest(problems, "context_length_exceeded")


async def rerank(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    served = worker.require_served()
    reranker = served.pooled.reranker
    if reranker is None:
        return response(NO_RERANK, Family.OPENAI)
    parsed = parse_rerank(parse_json_object(await request.read()))
    if worker.adapters.named(parsed.model) is not None:
        raise InvalidRequest([Problem("model", "the served model", f"model {parsed.model!r} is a LoRA adapter; "
                                      "/v1/rerank scores with the base model: name it, or no model", parsed.model)])
    model = served_model(worker, parsed.model)
    started = time.monotonic()
    # Off the event loop: a thousand documents keep the tokenizer (and the chat template) busy.
    prompts = await asyncio.to_thread(lambda: [served.pooled.rerank_tokens(reranker, parsed.query, document)
                                               for document in parsed.documents])
    lengths = [len(prompt) for prompt in prompts]
    if max(lengths) > reranker.limit:
        raise _too_long(lengths, reranker.limit, reranker.limited_by)
    try:
        scores = await asyncio.wait_for(served.pooled.rerank(reranker, prompts, request["request_id"]),
                                        worker.settings.request_timeout)
    except (EmbeddingFailed, asyncio.TimeoutError) as exc:
        log.warning("rerank_failed", documents=len(prompts), message=str(exc) or "timeout")
        return response(pooled_failure(exc, worker.settings.request_timeout), Family.OPENAI)
    n_tokens = sum(lengths)
    log.info("rerank_done", route=reranker.route, documents=len(prompts), prompt_tokens=n_tokens,
             e2e_ms=round((time.monotonic() - started) * 1e3, 1))
    best = sorted(range(len(scores)), key=lambda i: -scores[i])[:parsed.top_n]  # ties keep document order
    return web.json_response({
        "model": model,
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "results": [{"index": i, "relevance_score": scores[i],
                     **({"document": {"text": parsed.documents[i]}} if parsed.return_documents else {})}
                    for i in best],
    })


routes.post("/v1/rerank")(rerank)
routes.post("/rerank")(rerank)
