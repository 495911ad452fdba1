"""POST /v1/embeddings in OpenAI's shape: texts or token ids in, one pooled, L2-normalized vector each out."""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from worker.api.embedding_job import embedded, require_embeddings
from worker.api.problems import Problem, Reader, integral, parse_json_object
from worker.api.request_checks import served_model
from worker.api.state import WORKER
from worker.problem import listed

if TYPE_CHECKING:
    from worker.engine import Vector

routes = web.RouteTableDef()

MAX_INPUTS = 2048  # per request, as OpenAI's
ENCODINGS = ("float", "base64")
INPUT_SHAPE = "a string, a list of strings, a list of token ids, or a list of lists of token ids"

@dataclass(frozen=True)
class EmbeddingRequest:
    model: str | None
    inputs: list[str | list[int]]  # each a non-empty text, or non-empty token ids of the vocab
    fields: list[str]  # where each input is in the body: "input" or "input[i]"
    encoding: str  # one of ENCODINGS


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integral(raw: Any) -> Any:
    """Token ids sent as 79.0 are the integer 79 (JSON has one number type), at either list depth."""
    if not isinstance(raw, list):
        return raw
    return [[integral(t) for t in item] if isinstance(item, list) else integral(item) for item in raw]


def _input_problems(field: str, item: Any, n_vocab: int) -> list[Problem]:
    if isinstance(item, str):
        return [] if item else [Problem(field, "a non-empty string", f"{field} is an empty string")]
    if not isinstance(item, list):
        return [Problem(field, INPUT_SHAPE, f"{field} must be a string or a list of token ids", item)]
    if not item:
        return [Problem(field, "at least one token id", f"{field} is an empty list")]
    constraint = f"token ids 0..{n_vocab - 1}"
    return [Problem(f"{field}[{j}]", constraint, f"{field}[{j}] is {token!r}, not a token id of this model", token)
            for j, token in enumerate(item) if not (_is_token(token) and 0 <= token < n_vocab)]


def _inputs(r: Reader, n_vocab: int) -> tuple[list[Any], list[str]]:
    """`input` as a list of inputs and their field names; each problem noted in `r`."""
    raw = _integral(r.body.get("input"))
    if isinstance(raw, str) or (isinstance(raw, list) and raw and all(_is_token(x) for x in raw)):
        items, fields = [raw], ["input"]
    elif isinstance(raw, list) and raw:
        items, fields = raw, [f"input[{i}]" for i in range(len(raw))]
    else:
        message = "input is required" if raw is None else f"input must be {INPUT_SHAPE}, and not empty"
        r.problem("input", INPUT_SHAPE, message, raw)
        return [], []
    if len(items) > MAX_INPUTS:
        r.problem("input", f"at most {MAX_INPUTS} inputs", f"input has {len(items)} inputs; at most "
                  f"{MAX_INPUTS} are accepted in one request", len(items))
        return [], []
    r.problems.extend(listed([p for field, item in zip(fields, items) for p in _input_problems(field, item, n_vocab)],
                           "input", INPUT_SHAPE))
    return items, fields


def parse_embeddings(body: dict[str, Any], n_vocab: int, width: int) -> EmbeddingRequest:
    r = Reader(body)
    inputs, fields = _inputs(r, n_vocab)
    model = r.string("model")
    encoding = r.string("encoding_format", "float")
    if encoding not in ENCODINGS:
        r.problem("encoding_format", " or ".join(ENCODINGS), "encoding_format must be float or base64", encoding)
    dimensions = r.number("dimensions", integer=True, low=1)
    if dimensions is not None and dimensions != width:
        r.problem("dimensions", f"dimensions = {width}",
                  f"this model's embeddings have {width} dimensions; dimensions {dimensions} would cut them, "
                  f"which only models trained for it allow: leave dimensions out or send {width}", dimensions)
    r.string("user")  # accepted, as OpenAI's; nothing here depends on it
    r.done()
    return EmbeddingRequest(model, inputs, fields, encoding)


def _encode(vector: Vector, encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector.tolist()
    if sys.byteorder == "big":  # base64 carries little-endian float32, as OpenAI's and what its SDK decodes
        vector = vector[:]
        vector.byteswap()
    return base64.b64encode(vector.tobytes()).decode("ascii")


@routes.post("/v1/embeddings")
async def embeddings(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    served = worker.require_served()
    require_embeddings(served)
    parsed = parse_embeddings(parse_json_object(await request.read()), served.facts.n_vocab,
                              served.pooled.embedding_width)
    served_model(worker, parsed.model)
    vectors, n_tokens = await embedded(worker, served, parsed.inputs, parsed.fields, INPUT_SHAPE)
    return web.json_response({
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": _encode(v, parsed.encoding)}
                 for i, v in enumerate(vectors)],
        "model": worker.model_id,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    })
