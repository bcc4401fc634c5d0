"""UI security plumbing: security headers (CSP), the session-signing key, the
login marker, CSRF tokens and same-site redirects."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sepp.server.auth import Authenticator, Token

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


class SecurityHeaders:
    """ASGI middleware adding CSP and friends to every HTML response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY")]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def session_secret(auth: Authenticator) -> str:
    """The session-signing key: ``Authenticator.session_key`` — derived from
    ``auth.session_secret`` (or ``admin_token``) and the token digests, else random per process."""
    return auth.session_key()


def safe_next(target: str | None) -> str:
    """A same-site path to go back to after login (``/`` for anything else: no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target



def session_token(request: Request, auth: Authenticator) -> Token | None:
    """The admin token a logged-in session holds (``auth`` = its name, ``marker`` =
    ``Token.marker``), when it is still configured, unchanged and has role ``admin``; else None."""
    return auth.by_marker(request.session.get("auth"), request.session.get("marker"))


def is_authed(request: Request, auth: Authenticator) -> bool:
    """Whether the session may see pages: always when the UI needs no login (no admin token
    checked), else when it holds a valid admin token (``session_token``)."""
    if not auth.required("admin"):
        return True
    return session_token(request, auth) is not None


def csrf_token(request: Request) -> str:
    """The session's CSRF token (created on first use: 32 random bytes, URL-safe base64)."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


async def csrf_ok(request: Request, form: Callable[[Request], Awaitable[FormData]]) -> bool:
    """Whether a POST carries the session's CSRF token, in the ``X-CSRF-Token`` header or
    else the ``csrf_token`` form field (read with ``form``); compared in constant time."""
    expected = request.session.get("csrf")
    if not isinstance(expected, str) or not expected:
        return False
    presented = request.headers.get("x-csrf-token", "")
    if not presented:
        value = (await form(request)).get("csrf_token", "")
        presented = value if isinstance(value, str) else ""
    return hmac.compare_digest(presented.encode(), expected.encode())
