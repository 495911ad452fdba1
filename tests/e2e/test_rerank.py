"""/v1/rerank on the test model, which has no rank head: its own yes/no logits for the Qwen3-Reranker question
(worker/engine/pooling/rerank.py). SmolLM2-135M answers that question little better than chance (it put the
relevant document first for 1 to 3 of 8 obvious pairs, whatever the wording tried: docs/models.md, "Reranking"),
so what is asserted is the route itself: each score is exactly p(yes) over {yes, no} from the model's logits after
that question, as the chat route's logprobs give them, and as llama-cpp-python's own Llama computes it (an oracle
outside the worker, to rounding), with the order of a pair built so the answer is known; the same scores every
time, alone or beside generation; generation beside it unchanged; llama-server's response shape; every bad input."""

from __future__ import annotations

import asyncio
import math

import llama_cpp

from tests.helpers import openai_once
from worker.engine.pooling.rerank import relevance_messages

QUERY = "What is the capital of France?"
DOCUMENTS = ["Paris is the capital and largest city of France.", "Bananas grow in tropical climates.",
             "The Pacific Ocean is the largest ocean on Earth.", "Python is a programming language."]


async def rerank(http, base_url: str, body: dict, path: str = "/v1/rerank") -> dict:
    return await openai_once(http, base_url + path, body)


async def token(http, base_url: str, word: str) -> int:
    async with http.post(base_url + "/tokenize", json={"content": word}) as response:
        (only,) = (await response.json())["tokens"]
    return only


async def forced_logprob(http, base_url: str, document: str, word: int) -> float:
    """The model's log probability of `word` first, after the relevance question about `document` (the chat route
    builds the same prompt; logprobs are the raw logits', before the bias that makes it sample `word`)."""
    body = {"messages": relevance_messages(QUERY, document), "max_tokens": 1, "temperature": 0, "logprobs": True,
            "logit_bias": {str(word): 100}}
    answer = await openai_once(http, base_url + "/v1/chat/completions", body)
    return answer["choices"][0]["logprobs"]["content"][0]["logprob"]


async def test_each_score_is_the_models_own_p_yes_best_first_in_llama_servers_shape(http, base_url):
    ranked = await rerank(http, base_url, {"query": QUERY, "documents": DOCUMENTS, "top_n": 3,
                                           "return_documents": True})
    assert ranked["object"] == "list" and ranked["model"] and ranked["usage"]["prompt_tokens"] > 4 * 40
    results = ranked["results"]
    assert len(results) == 3 and set(results[0]) == {"index", "relevance_score", "document"}
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert all(DOCUMENTS[r["index"]] == r["document"]["text"] for r in results)
    yes, no = await token(http, base_url, "yes"), await token(http, base_url, "no")
    for result in results:
        document = DOCUMENTS[result["index"]]
        margin = (await forced_logprob(http, base_url, document, yes)) - (await forced_logprob(http, base_url,
                                                                                                document, no))
        assert math.isclose(result["relevance_score"], 1 / (1 + math.exp(-margin)), abs_tol=1e-6)


# Documents the model judges far apart (llama-cpp-python's margins here: +1.28 and -0.03), so their order is known.
KNOWN_ORDER = ["Paris.", "No, no, no."]
# How far the worker's yes-no margin may sit from llama.cpp's own: the same prompt's logits move with how it is cut
# into batches and with the kernels' summing order (up to ~1.0 on this model: bench/probes/RESULTS.md); measured
# here, 0.07-0.29.
MARGIN_TOLERANCE = 0.5


def _margin(p_yes: float) -> float:
    return math.log(p_yes / (1 - p_yes))


async def test_scores_are_llama_cpp_pythons_own_p_yes_for_the_same_prompt(http, base_url, model_path):
    """An oracle outside the worker: llama-cpp-python's Llama, on llama.cpp's own kernels in one batch, reads the same
    tokens (the chat template's rendering with its special tokens, checked equal to the worker's) and its last logits
    give p(yes) over {yes, no}: each score agrees within MARGIN_TOLERANCE, and wherever the oracle's margins are
    further apart than twice that, the worker's order is the oracle's."""
    documents = [*DOCUMENTS, *KNOWN_ORDER]
    ranked = (await rerank(http, base_url, {"query": QUERY, "documents": documents}))["results"]
    yes, no = await token(http, base_url, "yes"), await token(http, base_url, "no")
    llm = llama_cpp.Llama(str(model_path), n_ctx=1024, n_threads=1, logits_all=True, verbose=False)
    oracle = {}
    for index, document in enumerate(documents):
        async with http.post(base_url + "/apply-template",
                             json={"messages": relevance_messages(QUERY, document)}) as response:
            text = (await response.json())["prompt"]
        tokens = llm.tokenize(text.encode(), add_bos=True, special=True)
        async with http.post(base_url + "/tokenize", json={"content": text, "add_special": True,
                                                           "parse_special": True}) as response:
            assert (await response.json())["tokens"] == tokens
        llm.reset()
        llm.eval(tokens)
        logits = llm.scores[llm.n_tokens - 1]
        oracle[index] = float(logits[yes]) - float(logits[no])
    llm.close()
    margins = {result["index"]: _margin(result["relevance_score"]) for result in ranked}
    assert all(abs(margins[i] - oracle[i]) <= MARGIN_TOLERANCE for i in oracle), (margins, oracle)
    place = [result["index"] for result in ranked]
    apart = [(a, b) for a in oracle for b in oracle if oracle[a] - oracle[b] > 2 * MARGIN_TOLERANCE]
    assert (len(DOCUMENTS), len(DOCUMENTS) + 1) in apart  # the known pair is among them
    assert all(place.index(a) < place.index(b) for a, b in apart)


async def test_scores_are_the_same_every_time_alone_or_beside_generation(http, base_url):
    body = {"query": QUERY, "documents": [{"text": d} for d in DOCUMENTS]}
    alone = (await rerank(http, base_url, body, "/rerank"))["results"]
    assert sorted(r["index"] for r in alone) == [0, 1, 2, 3] and "document" not in alone[0]
    chat = {"messages": [{"role": "user", "content": "Tell me about lighthouses."}], "max_tokens": 48,
            "temperature": 0}
    solo = await openai_once(http, base_url + "/v1/chat/completions", chat)
    beside, again, *singles = await asyncio.gather(
        openai_once(http, base_url + "/v1/chat/completions", chat), rerank(http, base_url, body),
        *(rerank(http, base_url, {"query": QUERY, "documents": [d]}) for d in DOCUMENTS))
    assert again["results"] == alone
    assert [s["results"][0]["relevance_score"] for s in singles] == \
        [next(r["relevance_score"] for r in alone if r["index"] == i) for i in range(4)]
    assert beside["choices"][0]["message"]["content"] == solo["choices"][0]["message"]["content"]


async def test_every_bad_rerank_input_is_listed(http, base_url):
    async with http.post(base_url + "/v1/rerank", json={"documents": [], "top_n": 0}) as response:
        assert response.status == 400
        fields = [p["field"] for p in (await response.json())["error"]["errors"]]
    assert fields == ["query", "documents", "top_n"]
    async with http.post(base_url + "/v1/rerank", json={"query": "", "documents": ["a", 3, {"txt": "b"}],
                                                         "top_n": 1.5}) as response:
        fields = [p["field"] for p in (await response.json())["error"]["errors"]]
    assert fields == ["query", "documents[1]", "documents[2]", "top_n"]
    long = "lighthouse " * 2500  # ~2,500 tokens; a slot holds 2,048
    async with http.post(base_url + "/v1/rerank", json={"query": QUERY, "documents": ["short", long, long]}) as r:
        assert r.status == 400
        error = (await r.json())["error"]
    assert error["code"] == "context_length_exceeded" and [p["field"] for p in error["errors"]] == \
        ["documents[1]", "documents[2]"]
    assert "at most 2048 fit a slot's context" in error["errors"][0]["message"]
    async with http.post(base_url + "/v1/rerank", json={"query": QUERY, "documents": ["a"], "model": "x"}) as r:
        assert r.status == 404
    ranked = await rerank(http, base_url, {"query": QUERY, "documents": DOCUMENTS[:2], "top_n": 10})
    assert len(ranked["results"]) == 2  # above the documents' count: all of them, as llama-server answers
