"""schemathesis hooks for tests/e2e/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

What no JSON schema can say about a language model's API: how long a generation takes, whether
a prompt fits the context, and limits counted in UTF-8 bytes. Everything else the fuzzer finds is a failure.
"""

from __future__ import annotations

import json
import re

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

from worker.api.anthropic.request import ANSWERED_CALLS

MAX_TOKENS = 4  # several streamed pieces an answer; ~1,300 generating cases at ~12 ms a decoded token
CAPPED = {"/v1/chat/completions", "/v1/completions", "/execute", "/v1/inference", "/v1/messages", "/v1/responses"}
OPTIONAL = {"/v1/chat/completions", "/v1/completions", "/v1/responses"}  # no max_tokens: up to the end of the context
LIMITS = {"/v1/responses": ("max_output_tokens",)}  # a route's own name for max_tokens
RERANK, MAX_DOCUMENTS = {"/v1/rerank", "/rerank"}, 4
OLLAMA = {"/api/chat", "/api/generate"}  # capped by options.num_predict; none (or -1, -2): to the context's end


@schemathesis.deserializer("application/x-ndjson")
def ndjson(ctx, response) -> list:
    """Ollama's streams: /openapi.json states one as the list of its lines."""
    return [json.loads(line) for line in response.content.splitlines() if line.strip()]


@schemathesis.hook
def before_call(ctx, case, **kwargs) -> None:
    """Generations stop at MAX_TOKENS tokens, and a valid rerank scores MAX_DOCUMENTS documents at most: the API is
    under test, not the model's speed.

    Valid bodies are capped; an invalid one only gets a cap where it named none, so that a body the
    worker wrongly accepts still ends soon (and is reported) while its own bad values stay as drawn.
    """
    body = case.body
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if positive and case.path in RERANK and isinstance(body, dict) and isinstance(body.get("documents"), list):
        body["documents"] = body["documents"][:MAX_DOCUMENTS]  # each is a prompt to prefill: keep the case short
    if case.path in OLLAMA and isinstance(body, dict) and isinstance(body.get("options", {}), (dict, type(None))):
        _cap_ollama(body, positive)
    if case.path not in CAPPED or not isinstance(body, dict):
        return
    names = LIMITS.get(case.path, ("max_tokens", "max_completion_tokens"))
    if positive:
        asked = [body.get(name) for name in names]
        body[names[0]] = min([MAX_TOKENS, *(n for n in asked if isinstance(n, int))])
    elif case.path in OPTIONAL and not set(names) & body.keys():
        body[names[0]] = MAX_TOKENS


def _cap_ollama(body: dict, positive: bool) -> None:
    options = body.get("options") or {}
    asked = options.get("num_predict")
    if positive:
        body["options"] = {**options, "num_predict": min(MAX_TOKENS, asked) if isinstance(asked, int) and asked > 0
                           else MAX_TOKENS}
    elif "num_predict" not in options:
        body["options"] = {**options, "num_predict": MAX_TOKENS}


# Fields whose rule ties them to another field or to how the worker was started: best_of must equal n,
# top_logprobs needs logprobs, echo excludes logprobs, n is at most --parallel, dimensions is the model's width,
# one constraint at a time (grammar, response_format or a forced tool call), a named tool_choice names a tool,
# and (Anthropic) a last message that calls tools needs their results after it.
# previous_response_id names a response stored earlier in the run, which the fuzzer cannot know; a thinking budget
# is one field or another (reasoning_effort or reasoning_budget), below max_tokens, and needs a model that thinks.
# Ollama's think needs a model that thinks, a raw prompt takes no system prompt, and options.num_ctx is at most the
# worker's per-request context; its model-store routes are refused whatever they send (code one_model).
# A model's template and vocabulary decide two more: tools need a template that shows them, and fill-in-the-middle
# (suffix, /infill) needs FIM tokens, which the test model has neither of; and a final assistant message is continued,
# so two of them, or one that calls tools, are refused.
RELATIONAL = {"best_of", "top_logprobs", "echo", "n", "dimensions", "response_format", "tool_choice",
              "previous_response_id", "reasoning_effort", "reasoning", "thinking", "think", "raw", "tools", "suffix",
              "input_prefix"}
ENDINGS = {"one assistant message at the end at most", "no tool calls in a final assistant message"}
# A grammar's GBNF and a schema's convertibility are languages of their own that JSON Schema cannot state:
# the grammar fields, and the schemas of response_format, output_config.format and of a forced call's tool.
LANGUAGES = re.compile(r"grammar|json_schema|response_format\.json_schema|output_config\.format\.schema|format|"
                       r"text\.format\.schema|tools\[\d+\]\.(function\.parameters|parameters|input_schema)")


def _beyond_schema(response) -> bool:
    """A 400 for a limit JSON Schema cannot state: the tokens a prompt needs (its code says
    context_length_exceeded), stop strings' and DRY breakers' UTF-8 bytes (maxLength counts characters), a rule
    between fields (RELATIONAL), or a grammar or schema the converter or llama.cpp refuses (LANGUAGES)."""
    body = response.json()
    error = body.get("error")
    problems = body.get("errors") or (error.get("errors", []) if isinstance(error, dict) else [])
    return "context_length_exceeded" in response.text or body.get("code") == "one_model" or any(
        (p["field"] in ("stop", "stop_sequences", "options.stop", "dry_sequence_breakers")
         and p["constraint"].endswith(" bytes"))
        or p["field"] == "options.num_ctx"
        or re.split(r"[.\[]", p["field"])[0] in RELATIONAL or p["constraint"] in (ANSWERED_CALLS, *ENDINGS)
        or LANGUAGES.match(p["field"]) for p in problems)


@schemathesis.hook
def filter_failure(ctx, failure, case, response) -> bool:
    """Valid data refused for one of those limits is excused; every other failure stands."""
    return not (isinstance(failure, RejectedPositiveData) and response.status_code == 400 and _beyond_schema(response))
