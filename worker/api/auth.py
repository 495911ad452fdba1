"""API-key auth for every route but /health, compared in constant time. A key comes as `Authorization: Bearer <key>`
(OpenAI's clients, the pool manager) or `x-api-key: <key>` (Anthropic's); either one that matches lets a request in.
"""

from __future__ import annotations

import hmac

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

OPEN_PATHS = frozenset({"/health", "/v1/health"})


def _refuse(code: str, message: str) -> web.Response:
    # Readable by both families: OpenAI's clients read error.code, Anthropic's read type and error.type.
    body = {"type": "error", "error": {"type": "authentication_error", "code": code, "message": message}}
    return web.json_response(body, status=401, headers={"WWW-Authenticate": "Bearer"})


def _presented(request: web.Request) -> list[bytes]:
    keys = []
    scheme, _, bearer = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and bearer:
        keys.append(bearer.encode())
    if api_key := request.headers.get("x-api-key"):
        keys.append(api_key.encode())
    return keys


def auth_middleware(tokens: tuple[str, ...]) -> Middleware:
    expected = [token.encode() for token in tokens]

    @web.middleware
    async def require_key(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not expected or request.path in OPEN_PATHS:
            return await handler(request)
        presented = _presented(request)
        if not presented:
            return _refuse("MISSING_API_KEY", "send Authorization: Bearer <key> or x-api-key: <key>")
        # Compare every key with every token, so the time taken says nothing about which matched.
        matches = [hmac.compare_digest(given, token) for given in presented for token in expected]
        if not any(matches):
            return _refuse("INVALID_API_KEY", "the API key is not valid")
        return await handler(request)

    return require_key
