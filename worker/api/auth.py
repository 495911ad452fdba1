"""Bearer-token auth for every route but /health, compared in constant time."""

from __future__ import annotations

import hmac

from aiohttp import web

OPEN_PATHS = frozenset({"/health", "/v1/health"})


def _refuse(code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=401,
                             headers={"WWW-Authenticate": "Bearer"})


def auth_middleware(tokens: tuple[str, ...]):
    expected = [token.encode() for token in tokens]

    @web.middleware
    async def require_bearer(request: web.Request, handler):
        if not expected or request.path in OPEN_PATHS:
            return await handler(request)
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return _refuse("MISSING_API_KEY", "send Authorization: Bearer <token>")
        # Compare against every token, so the time taken says nothing about which matched.
        matches = [hmac.compare_digest(given.encode(), token) for token in expected]
        if not any(matches):
            return _refuse("INVALID_API_KEY", "the bearer token is not valid")
        return await handler(request)

    return require_bearer
