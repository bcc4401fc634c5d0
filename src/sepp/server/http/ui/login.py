"""The UI's login (``GET``/``POST /login``, ``POST /logout``) and the two open odds and
ends: ``/queues`` (to the dashboard's queue list) and ``/favicon.ico``."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response

from sepp.server.http.ui.kit import STATIC, PageKit
from sepp.server.http.ui.security import safe_next


class LoginPages:
    """The login form, logout, and the two open odds and ends (``/queues``, ``/favicon.ico``)
    over ``kit``."""

    def __init__(self, kit: PageKit) -> None:
        self.kit = kit
        self.admin = kit.admin

    # ------------------------------------------------------------------ login

    async def queues_index(self, _request: Request) -> Response:
        """``/queues``: the queue list is the dashboard's (a new user's trial: it was a 404)."""
        return RedirectResponse("/#queues-h", status_code=307)

    async def favicon(self, _request: Request) -> Response:
        """``/favicon.ico`` (it was a 404 in every browser's log); open without login."""
        return FileResponse(STATIC / "favicon.ico", media_type="image/x-icon",
                            headers={"cache-control": "public, max-age=86400"})

    async def login_page(self, request: Request) -> Response:
        """The token form (or straight through when no token is configured)."""
        nxt = safe_next(request.query_params.get("next"))
        if self.kit.authed(request):
            return RedirectResponse(nxt, status_code=303)
        return self.kit.render(request, "login.html", {"title": "Log in", "next": nxt, "error": ""})

    async def login_submit(self, request: Request) -> Response:
        """Check the token (SHA-256, constant time against every configured digest); a token
        with role ``admin`` marks the session (its name and ``Token.marker``) and goes back; an
        unknown one or one without ``admin`` is refused (401 / 403) and counted like a gRPC
        auth failure."""
        form = await self.kit.form(request)
        nxt = safe_next(str(form.get("next", "/")))
        presented = str(form.get("token", "")).strip()
        if not self.kit.login_on:
            return RedirectResponse(nxt, status_code=303)
        token = self.kit.auth.identify(presented)
        if token is None:
            self.kit.auth.failed("missing" if not presented else "unknown", "web UI login with "
                             + ("no token" if not presented else "an unknown token"), method="/login", role="admin")
            return self.kit.render(request, "login.html", {"title": "Log in", "next": nxt, "error":
                               "That is not the admin token (nor any token this server knows)."}, 401)
        if "admin" not in token.roles:
            self.kit.auth.failed("forbidden", f"web UI login with token {token.name!r}, which lacks role admin",
                             method="/login", role="admin", token=token.name)
            return self.kit.render(request, "login.html", {"title": "Log in", "next": nxt, "error":
                               f"Token {token.name!r} does not have role 'admin', which the web UI needs."}, 403)
        request.session.clear()
        request.session["auth"] = token.name
        request.session["marker"] = token.marker
        request.session["csrf"] = secrets.token_urlsafe(32)
        return RedirectResponse(nxt, status_code=303)

    async def logout(self, request: Request) -> Response:
        """Forget the session."""
        request.session.clear()
        return RedirectResponse("/login" if self.kit.login_on else "/", status_code=303)
