"""What every page of the web UI shares: ``PageKit`` — the admin engine, rendering with the
common context, flashes, the parsed form, and the guards each route is wrapped in (login,
CSRF, and the refusals shown as error pages).

The page modules (``queue_pages``, ``job_pages``, ``lists``, ``bulk``, ``periodic``, …) take
a ``PageKit`` and import this module, never ``routes``: ``routes`` builds the kit and the pages
and holds the route table, so no page reaches into another's privates and no import circles.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from sepp.domain.ids import job_id_text
from sepp.domain.store_errors import StoreError
from sepp.server.admin import AdminEngine, StateConflict, state_name
from sepp.server.auth import Authenticator
from sepp.server.errors import InvalidRequest, NotFound
from sepp.server.http.ui.figures_view import fmt_runtime
from sepp.server.http.ui.forms import read_form
from sepp.server.http.ui.security import csrf_ok, csrf_token, is_authed
from sepp.server.http.ui.views import (
    SLUG_OF,
    STATE_SLUGS,
    TAB_ORDER,
    fmt_ago,
    fmt_bytes,
    fmt_duration,
    fmt_iso,
    fmt_time,
)
from sepp.server.parts import ServerParts

#: Templates and static files stay next to the package (``sepp/server/http/``).
HTTP_DIR = Path(__file__).parent.parent
TEMPLATES = HTTP_DIR / "templates"
STATIC = HTTP_DIR / "static"
HTMX = "vendor/htmx.org/htmx.min.js"

#: Dashboard refresh period, seconds.
POLL_SECONDS = 5
#: The job-type figures' refresh period on the queue page, seconds.
TYPES_POLL_SECONDS = 15

Handler = Callable[[Request], Awaitable[Response]]


class PageKit:
    """The UI's shared plumbing over an ``AdminEngine``: the Jinja2 templates (autoescaped,
    with the UI's filters), ``render`` / ``flash`` / ``form``, and the route wrappers
    ``page`` (login), ``post`` (CSRF, then login), ``open`` and ``open_post`` (CSRF only).

    ``auth`` holds the tokens: when admin is checked the UI logs in with any token that
    has role ``admin``, else it is open.
    """

    def __init__(self, parts: ServerParts, admin: AdminEngine, auth: Authenticator) -> None:
        #: The node's shared parts (config, limits, clock, nodes) the pages read.
        self.parts = parts
        self.admin = admin
        self.auth = auth
        #: Whether the UI needs a login.
        self.login_on = auth.required("admin")
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                                 undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        env.filters.update(time=fmt_time, iso=fmt_iso, duration=fmt_duration, bytes=fmt_bytes, ago=fmt_ago,
                           qurl=lambda name: quote(str(name), safe=""), state=state_name,
                           slug=lambda s: SLUG_OF.get(int(s), ""), number=lambda n: f"{n:,}",
                           uuid=job_id_text, runtime=fmt_runtime)
        env.globals.update(POLL_SECONDS=POLL_SECONDS, HTMX=HTMX, STATE_SLUGS=STATE_SLUGS,
                           TYPES_POLL_SECONDS=TYPES_POLL_SECONDS, TAB_ORDER=TAB_ORDER)
        self.templates = Jinja2Templates(env=env)

    csrf_token = staticmethod(csrf_token)

    def authed(self, request: Request) -> bool:
        """Whether the request's session is logged in (always, when no token is configured)."""
        return is_authed(request, self.auth)

    def _login_redirect(self, request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        url = "/login?" + urlencode({"next": target})
        if request.headers.get("HX-Request"):
            return Response(status_code=200, headers={"HX-Redirect": url})
        return RedirectResponse(url, status_code=303)

    def page(self, handler: Handler) -> Handler:
        """``handler`` behind the login (to the login page, and back, when not logged in),
        its refusals shown as error pages (``guard``)."""
        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            if not self.authed(request):
                return self._login_redirect(request)
            return await self.guard(handler, request)

        return wrapped

    def post(self, handler: Handler) -> Handler:
        """A form's ``handler``: the session's CSRF token first (403), then as ``page``."""
        page = self.page(handler)

        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            if not await self.csrf_ok(request):
                return self.render(request, "error.html", {"title": "Forbidden", "message":
                                   "This form is stale or was not sent by the sepp UI (CSRF token missing or "
                                   "wrong). Reload the page and try again."}, 403)
            return await page(request)

        return wrapped

    def open(self, handler: Handler) -> Handler:
        """``handler`` as it is: open without login."""
        return handler

    def open_post(self, handler: Handler) -> Handler:
        """A form open without login (the login form): only the CSRF token is checked (403)."""
        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            if not await self.csrf_ok(request):
                return self.render(request, "error.html", {"title": "Forbidden", "message":
                                   "CSRF token missing or wrong. Reload the page and try again."}, 403)
            return await handler(request)

        return wrapped

    async def form(self, request: Request) -> FormData:
        """The parsed form (``forms.read_form`` with the engine's message limit)."""
        return await read_form(request, self.parts.limits.max_message_bytes)

    async def csrf_ok(self, request: Request) -> bool:
        """Whether the request carries the session's CSRF token (form field or header)."""
        return await csrf_ok(request, self.form)

    async def guard(self, handler: Handler, request: Request) -> Response:
        """``handler``'s response, with ``NotFound`` shown as a 404 page, a refusal
        (``InvalidRequest``, ``StateConflict``) as a 400 and a store failure as a 503."""
        try:
            return await handler(request)
        except NotFound as exc:
            return self.render(request, "error.html", {"title": "Not found", "message": str(exc)}, 404)
        except (InvalidRequest, StateConflict) as exc:
            return self.render(request, "error.html", {"title": "Refused", "message": str(exc)}, 400)
        except StoreError as exc:
            return self.render(request, "error.html", {"title": "Unavailable", "message":
                               f"The server could not use its store ({exc}); nothing was changed."}, 503)

    def render(self, request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        """Render a template with the common context (CSRF token, flashes, auth state)."""
        flashes = request.session.pop("flash", []) if not name.startswith("_") else []
        base = {"csrf": self.csrf_token(request), "flashes": flashes, "auth_on": self.authed(request)
                and self.login_on, "path": request.url.path}
        return self.templates.TemplateResponse(request, name, {**base, **context}, status_code=status)

    @staticmethod
    def flash(request: Request, text: str, level: str = "ok") -> None:
        """Queue a message for the next page."""
        request.session.setdefault("flash", []).append([level, text])
