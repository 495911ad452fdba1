"""Hostile clients: fuzzed bodies, disconnect storms, and a leak check over thousands of requests."""

import asyncio
import http.client
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import WorkerProcess, start_worker
from worker.api.app import MAX_BODY_BYTES
from worker.api.openapi import document

FIELDS = ["model", "messages", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
          "logit_bias", "stream", "stream_options", "n", "repeat_penalty", "presence_penalty", "job_id",
          "repetition_penalty", "tools", "max_completion_tokens", "echo"]


SPEC = document()
SCHEMAS = SPEC["components"]["schemas"]


def resolved(schema: dict) -> dict:
    while "$ref" in schema:
        schema = SCHEMAS[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _body_schemas() -> dict[str, dict]:
    """Every POST route the worker documents (/openapi.json), with its body's schema."""
    routes = {path: resolved(ops["post"].get("requestBody", {}).get("content", {}).get("application/json", {})
                             .get("schema", {}))
              for path, ops in SPEC["paths"].items() if "post" in ops}
    slot = routes.pop("/slots/{id_slot}")
    return {**routes, **{f"/slots/0?action={action}": slot for action in ("save", "restore", "erase")}}


def _fields(schema: dict) -> set[str]:
    """Every field a schema names, those its anyOf/oneOf constraints name too."""
    schema = resolved(schema)
    named = set(schema.get("properties", {}))
    for part in schema.get("allOf", []) + schema.get("anyOf", []) + schema.get("oneOf", []):
        named |= _fields(part)
    return named


BODY_SCHEMAS = _body_schemas()
POST_ROUTES = {path: sorted(_fields(schema)) for path, schema in BODY_SCHEMAS.items()}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=12,
)


def bodies(fields: list[str]) -> st.SearchStrategy[dict]:
    """Bodies of the route's own fields and the generation fields, with any values, and keys of any text."""
    return st.dictionaries(st.sampled_from(sorted({*FIELDS, *fields})) | st.text(max_size=10), json_values,
                           max_size=8)


@pytest.fixture(scope="module")
def fuzz_worker(tmp_path_factory, model_path: Path):
    # A short timeout, so the rare valid body that starts a long generation ends soon (the fuzz's 1,120 bodies took
    # 1.7 s of answers in all, none near it); not 1 s, which a route's first pooled job (~0.6 s alone) passed on a
    # busy shared machine.
    # --embeddings and --slot-save-path: those routes read their bodies too.
    folder = tmp_path_factory.mktemp("fuzz")
    worker = start_worker(folder, "--model", str(model_path), "--parallel", "2", "--ctx-size", "1024",
                          "--request-timeout", "5", "--embeddings", "--slot-save-path", str(folder / "slots"))
    yield worker
    assert worker.stop() == 0


def post(worker: WorkerProcess, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
    host, port = worker.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# The routes that run a job in the engine: --request-timeout (5 s on the fuzz worker) ends a valid body's long answer
# there with a 504 (docs/operations.md, "Timeouts"). No route may answer any other 5xx: the tests send one request at a
# time to a loaded worker, so no queue fills (503) and nothing drains.
TIMED_ROUTES = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/execute", "/v1/inference", "/v1/rerank",
                "/rerank", "/infill", "/v1/messages", "/v1/responses", "/api/chat", "/api/generate", "/api/embed",
                "/api/embeddings"}


def error_fields(payload: bytes) -> list[str]:
    """The fields an error body's problems name, in any route family's shape (worker/api/error_shapes.py)."""
    body = json.loads(payload)
    error = body.get("error")
    problems = body["errors"] if "errors" in body else error["errors"]
    assert all(problem["message"] for problem in problems), body
    return [problem["field"] for problem in problems]


def assert_answer_is_sound(status: int, payload: bytes, path: str) -> None:
    assert status < 500 or (status == 504 and path in TIMED_ROUTES), (status, payload[:300])
    if 400 <= status < 500:
        body = json.loads(payload)
        error = body.get("error")
        if isinstance(error, str):  # Ollama's shape: the message alone
            message = error
        else:
            message = error["message"] if error else body["errors"][0]["message"]
        assert message, body
    if status == 200 and payload.startswith(b"data: "):
        assert payload.rstrip().endswith(b"data: [DONE]")


def test_every_post_route_is_fuzzed():
    assert len(POST_ROUTES) >= 28 and {"/v1/chat/completions", "/v1/messages", "/api/chat", "/v1/responses",
                                       "/v1/embeddings", "/infill", "/slots/0?action=save"} <= POST_ROUTES.keys()


@pytest.mark.parametrize("path", POST_ROUTES)
def test_fuzzed_bodies_never_5xx(fuzz_worker, path):
    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(body=bodies(POST_ROUTES[path]))
    def check(body):
        status, payload = post(fuzz_worker, path, json.dumps(body).encode())
        assert_answer_is_sound(status, payload, path)

    check()


# Bodies no route may read: not JSON, JSON that is not an object, JSON's constants that are not JSON, text that is
# not UTF-8 (an encoded surrogate, an overlong "/"), an escaped lone surrogate, nesting past the parser's depth.
MALFORMED = [b"", b"not json", b'{"model": "x"', b'{"model": "x"} {}', b"[1, 2]", b'"text"', b"null", b"42", b"true",
             b'{"temperature": NaN}', b'{"temperature": Infinity}', b"\xff\xfe{}", b'{"model": "\xed\xa0\x80"}',
             b'{"model": "\xc0\xaf"}', b'{"model": "\\ud800"}', b"[" * 100_000]
# These refuse whatever the body is: this worker serves one model for its life (api/ollama/models.py).
REFUSING = {"/api/copy", "/api/create", "/api/push"}


@pytest.mark.parametrize("path", POST_ROUTES)
def test_malformed_bodies_are_400_naming_the_body(fuzz_worker: WorkerProcess, path: str) -> None:
    for body in MALFORMED:
        if body == b"" and path.startswith("/slots/"):
            continue  # llama-server's clients send no body to erase a slot: it reads as {}
        status, payload = post(fuzz_worker, path, body)
        assert status == 400, (body[:30], payload[:300])
        named = {field.split("[")[0] for field in error_fields(payload)}
        assert named == {"model"} if path in REFUSING else "body" in named, (body[:30], payload[:300])
    # One byte past the 4 MiB limit: a 413 in the route's own shape, naming the body too.
    status, payload = post(fuzz_worker, path, b" " * (MAX_BODY_BYTES + 1))
    assert status == (400 if path in REFUSING else 413), payload[:300]
    assert error_fields(payload) == ["model" if path in REFUSING else "body"], payload[:300]


def field_schemas(schema: dict) -> dict[str, dict]:
    """A body schema's own fields (its properties, allOf's too), each with its schema; anyOf/oneOf parts only
    constrain fields (Responses's forced-call clause names chat's grammar, a field it does not take)."""
    schema = resolved(schema)
    fields = dict(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        fields |= field_schemas(part)
    return fields


def json_types(schema: dict) -> set[str]:
    """The JSON types a field's schema allows ("integer" within "number"); empty: it says none."""
    schema = resolved(schema)
    kinds = {schema["type"]} if isinstance(schema.get("type"), str) else set(schema.get("type", []))
    values = [schema["const"]] if "const" in schema else schema.get("enum", [])
    kinds |= {"null" if v is None else "boolean" if isinstance(v, bool) else "number" if isinstance(v, (int, float))
              else "string" if isinstance(v, str) else "array" if isinstance(v, list) else "object" for v in values}
    for part in schema.get("anyOf", []) + schema.get("oneOf", []):
        kinds |= json_types(part)
    return kinds | ({"number"} if "integer" in kinds else set())


# A value of each JSON type but null (which every optional field takes) and number (below, at its bounds).
TYPED_VALUES = {"boolean": True, "object": {"wrong": 1}, "string": "wrong", "array": [{"wrong": 1}]}


def typed_fields(path: str) -> list[tuple[str, dict]]:
    """The route's fields, and one level into the objects among them that require nothing (Ollama's options,
    stream_options), as the error names them: "options.temperature". (An object that requires a key, as
    tool_choice its type, is refused whole without it.)"""
    fields = []
    for name, schema in sorted(field_schemas(BODY_SCHEMAS[path]).items()):
        fields.append((name, schema))
        if not resolved(schema).get("required"):
            fields += [(f"{name}.{inner}", part) for inner, part in sorted(field_schemas(schema).items())]
    return fields


def with_field(body: dict, name: str, value: object) -> dict:
    """`body` with the field `name` ("options.top_k": one level in) set to `value`, its other fields kept."""
    outer, _, inner = name.partition(".")
    return {**body, outer: {**(body.get(outer) or {}), inner: value} if inner else value}


@pytest.mark.parametrize("path", POST_ROUTES)
def test_wrong_typed_fields_are_400_naming_the_field(fuzz_worker: WorkerProcess, path: str) -> None:
    """Each field the route's schema types, sent alone with a value of each type it does not take: a 400 whose
    problems name that field (every problem is listed, so the missing required fields do not hide it)."""
    checked = 0
    for name, schema in typed_fields(path):
        kinds = json_types(schema)
        assert kinds, f"{path}: the schema of {name} names no type"
        for kind, value in TYPED_VALUES.items():
            if kind in kinds:
                continue
            status, payload = post(fuzz_worker, path, json.dumps(with_field({}, name, value)).encode())
            assert status == 400, (name, value, payload[:300])
            assert name in error_fields(payload), (name, value, payload[:300])
            checked += 1
    assert checked or path in REFUSING | {"/lora-adapters"}, path  # those take no fields (or a list)


CHAT = [{"role": "user", "content": "Hi"}]
# A body each route answers, one token at most: what the tests below change one field of.
VALID: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": CHAT, "max_tokens": 1},
    "/v1/completions": {"prompt": "Hi", "max_tokens": 1},
    "/v1/embeddings": {"input": "Hi"},
    "/execute": {"job_id": "fuzz", "prompt": "Hi", "max_tokens": 1},
    "/v1/inference": {"job_id": "fuzz", "prompt": "Hi", "max_tokens": 1},
    "/cancel": {"job_id": "fuzz"},
    "/tokenize": {"content": "Hi"},
    "/detokenize": {"tokens": [1, 2]},
    "/apply-template": {"messages": CHAT},
    "/v1/rerank": {"query": "Hi", "documents": ["Hello"]},
    "/rerank": {"query": "Hi", "documents": ["Hello"]},
    "/infill": {"input_prefix": "a", "input_suffix": "b", "n_predict": 1},
    "/v1/messages": {"messages": CHAT, "max_tokens": 1},
    "/v1/messages/count_tokens": {"messages": CHAT},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 1},
    "/api/chat": {"messages": CHAT, "stream": False, "options": {"num_predict": 1}},
    "/api/generate": {"prompt": "Hi", "stream": False, "options": {"num_predict": 1}},
    "/api/embed": {"input": "Hi"},
    "/api/embeddings": {"prompt": "Hi"},
    "/api/show": {},
    "/api/pull": {"stream": False},
    "/slots/0?action=save": {"filename": "fuzz.bin"},
    "/slots/0?action=restore": {"filename": "fuzz.bin"},
    "/slots/0?action=erase": {},
}
# Fields bounded by the worker or its model, not by the schema: n and best_of by --parallel, dimensions by the model's
# embeddings, options.num_ctx by a request's context. A huge value is past those too.
SERVED_BOUNDS = {"n", "best_of", "dimensions", "options.num_ctx"}
# Past every bound, and past a double: JSON's 1e999 reads as infinity, an integer of 401 digits has no double at all.
HUGE = ["1e999", "-1e999", "1" + "0" * 400, "-1" + "0" * 400]


def double(value: float) -> bool:
    """Whether a double holds the number (math.isfinite raises for an integer past one)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def schema_takes(schema: dict, raw: str) -> bool:
    """Whether a field's schema (or one of its anyOf/oneOf parts) takes the number `raw`: an integer field an integer
    within its bounds, a number field a finite double within them (the worker holds it as one)."""
    value = json.loads(raw)
    schema = resolved(schema)
    for part in [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]:
        declared = {part["type"]} if isinstance(part.get("type"), str) else set(part.get("type", []))
        typed = ("integer" in declared and isinstance(value, int)) or ("number" in declared and double(value))
        if typed and part.get("minimum", -math.inf) <= value <= part.get("maximum", math.inf):
            return True
    return False


def test_every_route_has_a_valid_body() -> None:
    assert VALID.keys() == POST_ROUTES.keys() - REFUSING - {"/lora-adapters"}


@pytest.mark.parametrize("path", VALID)
def test_huge_numbers_are_400_naming_the_field_or_taken(fuzz_worker: WorkerProcess, path: str) -> None:
    """Each number field of a valid body set to a number past every bound: a 400 naming it where the schema refuses
    the value, else the answer the valid body gets (top_k 10^400 keeps every token). Never a 5xx: a float field's
    huge integer once reached ctypes on the engine's thread, which died, and every later request hung."""
    if path.endswith("restore"):  # the file it restores
        post(fuzz_worker, "/slots/0?action=save", json.dumps(VALID["/slots/0?action=save"]).encode())
    expected, payload = post(fuzz_worker, path, json.dumps(VALID[path]).encode())
    assert expected < 300 or path == "/infill", payload[:300]  # the test model has no fill-in-the-middle tokens
    for name, schema in typed_fields(path):
        if "number" not in json_types(schema):
            continue
        for raw in HUGE:
            body = json.dumps(with_field(VALID[path], name, "HUGE")).replace('"HUGE"', raw)
            status, payload = post(fuzz_worker, path, body.encode())
            if schema_takes(schema, raw) and name not in SERVED_BOUNDS:
                assert status == expected, (name, raw[:6], payload[:300])
            else:
                assert status == 400 and name in error_fields(payload), (name, raw[:6], payload[:300])


@pytest.mark.parametrize("path,field", [("/lora-adapters", "body[0].scale"), ("/v1/completions", "lora[0].scale"),
                                        ("/v1/messages", "lora[0].scale"), ("/v1/responses", "lora[0].scale")])
def test_a_huge_lora_scale_is_400_naming_it(fuzz_worker: WorkerProcess, path: str, field: str) -> None:
    """An adapter's scale of 401 digits: math.isfinite raises on it, once a 500 (api/adapters.py)."""
    scales = '[{"id": 0, "scale": 1' + "0" * 400 + "}]"
    body = scales if path == "/lora-adapters" else json.dumps({**VALID[path], "lora": "L"}).replace('"L"', scales)
    status, payload = post(fuzz_worker, path, body.encode())
    assert status == 400 and field in error_fields(payload), payload[:300]


# Text that is valid and hostile: a right-to-left override, zero-width and byte-order marks, a noncharacter, the last
# code point, NUL, a combining mark piled on, a joined emoji. Text like any other: the valid body's answer.
HOSTILE_TEXT = "\u202e\u200b\ufeff\ufffe\U0010ffff\x00" + "e" + "\u0301" * 8 + "\U0001f469\u200d\U0001f467"
TEXT_FIELDS = {"content", "prompt", "input", "query", "documents", "input_prefix", "input_suffix"}


def hostile(value: object, key: str = "") -> object:
    """`value` with every string under a text field (TEXT_FIELDS) made HOSTILE_TEXT."""
    if isinstance(value, dict):
        return {k: hostile(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [hostile(v, key) for v in value]
    return HOSTILE_TEXT if isinstance(value, str) and key in TEXT_FIELDS else value


@pytest.mark.parametrize("path", [path for path, body in VALID.items() if hostile(body) != body])
def test_hostile_unicode_text_is_text(fuzz_worker: WorkerProcess, path: str) -> None:
    expected, payload = post(fuzz_worker, path, json.dumps(VALID[path]).encode())
    status, payload = post(fuzz_worker, path, json.dumps(hostile(VALID[path])).encode())
    assert status == expected, payload[:300]
    assert_answer_is_sound(status, payload, path)


@pytest.mark.parametrize("body,content_type,completion_status", [
    (b'{"prompt": "a\\u0000b", "max_tokens": 1}', "application/json", 200),  # NUL is text like any other
    (b"\x00\x01\x02", "application/octet-stream", 400),
    (b"prompt=hi", "application/x-www-form-urlencoded", 400),
    (json.dumps({"prompt": "x", "max_tokens": 1, "stop": ["s"] * 10_000}).encode(), "application/json", 400),
    (json.dumps({"prompt": "x", "max_tokens": -5, "temperature": -1e308}).encode(), "application/json", 400),
    (b'{"prompt": "\xed\xa0\x80"}', "application/json", 400),  # a UTF-8-encoded lone surrogate
    (b"{" * 50_000, "application/json", 400),
])
def test_hand_written_hostile_bodies(fuzz_worker, body, content_type, completion_status):
    status, payload = post(fuzz_worker, "/v1/completions", body, content_type)
    assert status == completion_status, payload[:300]
    assert_answer_is_sound(status, payload, "/v1/completions")
    status, payload = post(fuzz_worker, "/execute", body, content_type)  # no job_id in any of them
    assert status == 400, payload[:300]
    assert_answer_is_sound(status, payload, "/execute")


async def ready(http, base_url) -> dict:
    async with http.get(base_url + "/v1/ready") as response:
        return await response.json()


async def test_disconnect_storm_of_200_streams(http, base_url):
    rng = random.Random(200)

    async def open_and_drop(i: int) -> None:
        route, body = (("/execute", {"job_id": f"s{i}", "prompt": "Write a poem", "max_tokens": 300})
                       if i % 2 else
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Write a poem"}],
                                                 "max_tokens": 300, "stream": True}))
        await asyncio.sleep(rng.random() * 2)
        response = await http.post(base_url + route, json=body)
        for _ in range(rng.randint(0, 6)):
            await response.content.readline()
        response.close()

    await asyncio.gather(*(open_and_drop(i) for i in range(200)))
    for _ in range(100):
        state = await ready(http, base_url)
        if state["running"] == state["waiting"] == state["kv_cells_used"] == 0:
            break
        await asyncio.sleep(0.1)
    assert (state["running"], state["waiting"], state["kv_cells_used"]) == (0, 0, 0)
    async with http.post(base_url + "/v1/completions", json={"prompt": "The capital of France is", "max_tokens": 3,
                                                            "temperature": 0}) as response:
        assert (await response.json())["choices"][0]["text"].startswith(" Paris")


def process_facts(pid: int) -> tuple[int, int, int]:
    """RSS in bytes, open file descriptors, threads."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return rss_kb * 1024, len(list(Path(f"/proc/{pid}/fd").iterdir())), len(list(Path(f"/proc/{pid}/task").iterdir()))


RSS_GROWTH_BOUND = 16 * 1024 * 1024


@pytest.mark.probe  # a soak: ~70 s on 2 cores (make test-probes)
async def test_no_leaks_over_2000_requests(http, worker):
    async def burst(n: int, offset: int) -> None:
        async def one(i: int) -> None:
            body = ({"prompt": f"Count: {i}", "max_tokens": 2, "stream": i % 2 == 0} if i % 3 else
                    {"job_id": f"leak-{i}", "prompt": f"Count: {i}", "max_tokens": 2})
            async with http.post(worker.url + ("/execute" if "job_id" in body else "/v1/completions"),
                                 json=body) as response:
                assert response.status == 200
                await response.read()

        for start in range(0, n, 8):
            await asyncio.gather(*(one(offset + start + k) for k in range(8)))

    await burst(200, 0)
    rss_200, fds_200, threads_200 = process_facts(worker.process.pid)
    await burst(1800, 200)
    rss_end, fds_end, threads_end = process_facts(worker.process.pid)
    assert rss_end - rss_200 < RSS_GROWTH_BOUND, (rss_200, rss_end)
    # Keep-alive sockets come and go, so descriptors may fall; they must not climb.
    assert fds_end <= fds_200 + 2 and threads_end <= threads_200


def test_escaped_lone_surrogate_is_400(fuzz_worker):
    status, payload = post(fuzz_worker, "/v1/completions", b'{"prompt": "\\ud800", "max_tokens": 1}')
    assert status == 400 and b"surrogate" in payload
