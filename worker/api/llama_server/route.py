"""llama-server's text utility routes: /tokenize, /detokenize, /apply-template, in its shapes."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from worker.api.chat_input import as_chat
from worker.api.openai.request import parse_chat
from worker.api.problems import Reader, integral, parse_json_object
from worker.api.state import WORKER
from worker.problem import MAX_LISTED

routes = web.RouteTableDef()

# A bad token list can be a million entries long: list this many, then count the rest.


def _piece(raw: bytes) -> str | list[int]:
    """llama-server's piece: the text, or its byte values when the token is not whole UTF-8 on its own."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def _token_ids(r: Reader, n_vocab: int) -> list[int]:
    raw = r.body.get("tokens")
    constraint = f"a list of token ids 0..{n_vocab - 1}"
    if not isinstance(raw, list):
        r.problem("tokens", constraint, "tokens must be a list of token ids", raw)
        return []
    ids = [integral(t) for t in raw]
    bad = [(i, t) for i, t in enumerate(ids)
           if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_vocab]
    for i, token in bad[:MAX_LISTED]:
        r.problem(f"tokens[{i}]", constraint, f"tokens[{i}] is {token!r}, not a token id of this model", token)
    if len(bad) > MAX_LISTED:
        r.problem("tokens", constraint, f"{len(bad) - MAX_LISTED} more entries are not token ids", len(bad))
    return ids


@routes.post("/tokenize")
async def tokenize(request: web.Request) -> web.Response:
    prompts = request.app[WORKER].require_served().prompts
    r = Reader(parse_json_object(await request.read()))
    content = r.string("content", required=True)
    add_special = r.boolean("add_special")  # llama-server's default: no BOS unless asked
    parse_special = r.boolean("parse_special", True)
    with_pieces = r.boolean("with_pieces")
    r.done()

    def tokenized() -> list[Any]:
        tokens = prompts.tokens(content, add_special=add_special, parse_special=parse_special)
        if not with_pieces:
            return tokens
        return [{"id": token, "piece": _piece(prompts.token_bytes(token))} for token in tokens]

    # Off the event loop: a 4 MiB body keeps the tokenizer busy long enough to stall every stream.
    return web.json_response({"tokens": await asyncio.to_thread(tokenized)})


@routes.post("/detokenize")
async def detokenize(request: web.Request) -> web.Response:
    served = request.app[WORKER].require_served()
    r = Reader(parse_json_object(await request.read()))
    tokens = _token_ids(r, served.facts.n_vocab)
    r.done()
    raw = await asyncio.to_thread(served.prompts.detokenize, tokens)
    # Token ids can end inside a character; those bytes come back as U+FFFD, as in generated text.
    return web.json_response({"content": raw.decode("utf-8", errors="replace")})


@routes.post("/apply-template")
async def apply_template(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    served = worker.require_served()
    # The chat route's own parsing, so a conversation renders here exactly when it would run there.
    chat = parse_chat(parse_json_object(await request.read()), served.facts.n_vocab, worker.sampling,
                      intake=worker.intake(served))
    return web.json_response({"prompt": served.chat_text(as_chat(chat))})
