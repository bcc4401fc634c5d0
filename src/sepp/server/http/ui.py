"""The admin web UI (SPEC §4): Starlette routes + Jinja2 templates + htmx, served by ``sepp serve``.

Pages (all HTML, server-rendered; JavaScript only enhances):

========================================  ==============================================
``GET /``                                 dashboard: queues, counts, oldest-ready age, chart
``GET /ui/partials/dashboard``            the dashboard body (htmx polls it every 5 s)
``GET /queues/{name}``                    queue: settings, counts, jobs by state (paged)
``GET /ui/partials/queue/{name}``         the queue's live counts + chart (polled)
``POST /queues/{name}/pause|resume|purge``
``GET /jobs/{id}``                        job: every field, payload, custom map, attempts
``POST /jobs/{id}/cancel|requeue|delete``
``GET /dead``                             dead letters: filters, dry-run count, list
``POST /dead/requeue``                    bulk redrive of the filtered dead letters
``GET /enqueue`` / ``POST /enqueue``      enqueue form → ``JobEngine.enqueue`` in-process
``GET /find``                             job id or (queue, idempotency key) → job page
``GET /login`` / ``POST /login|logout``   only when ``admin_token`` is configured
``GET /static/...``                       CSS, JS, vendored htmx (no CDN)
========================================  ==============================================

Safety: Jinja2 autoescaping is on for every template (payloads, custom values, errors,
names are user data and are never marked safe); every POST must carry the session's
CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``), else 403; responses
carry a strict Content-Security-Policy (scripts and styles from ``/static`` only). When
``admin_token`` is set, every page but ``/login`` and ``/static`` redirects to the
login page until the token was entered; the session is a signed cookie whose key is
derived from the token (so changing the token logs everybody out), else a random
per-process key.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import hashlib
import hmac
import json
import math
import secrets
import zoneinfo
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.quoting import quote as quote_value
from sepp.rejections import RejectionCode
from sepp.server.admin import AdminEngine, QueueStatsView, StateConflict, state_name
from sepp.server.engine import job_id_text
from sepp.server.errors import EngineError, InvalidRequest, JobRejected, NotFound, Overloaded
from sepp.server.rpc.convert import job_to_proto
from sepp.storage.admin import DeadFilter, JobQuery, MinuteRow
from sepp.storage.base import JobRecord, State
from sepp.storage.errors import StoreError
from sepp.wire import custom_type_name, duration_to_seconds

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
HTMX = "vendor/htmx.org/htmx.min.js"

#: How much of a payload the job page shows (bytes); the rest is summarised.
PAYLOAD_SHOWN = 256 * 1024
HEX_SHOWN = 16 * 1024
#: Dashboard refresh period, seconds.
POLL_SECONDS = 5

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")

_STATE_SLUGS = {s.name.lower().replace("_", "-"): int(s) for s in State}
_SLUG_OF = {v: k for k, v in _STATE_SLUGS.items()}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

Handler = Callable[[Request], Awaitable[Response]]


# ---------------------------------------------------------------------- formatting helpers


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _utc(us: int) -> dt.datetime | None:
    """µs since the epoch → an aware datetime, exactly (no float rounding); None outside
    the years 1–9999 (a damaged row's time: shown as empty, issue 14)."""
    try:
        return _EPOCH + dt.timedelta(microseconds=us)
    except (OverflowError, TypeError):
        return None


def fmt_time(us: int | None) -> str:
    """µs since the epoch → ``2026-05-01 10:30:05 UTC`` (empty for None or out of range)."""
    when = None if us is None else _utc(us)
    return "" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_iso(us: int | None) -> str:
    """µs since the epoch → ISO 8601 for ``<time datetime>`` (empty for None or out of range)."""
    when = None if us is None else _utc(us)
    return "" if when is None else when.isoformat(timespec="milliseconds")


def fmt_duration(seconds: float | None) -> str:
    """Seconds → ``850 ms``, ``42 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    if seconds is None:
        return "–"
    s = abs(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 3600:
        big, small = f"{int(s // 60)} min", int(s % 60)
        return f"{big} {small} s" if small else big
    if s < 86400:
        big, small = f"{int(s // 3600)} h", int(s % 3600 // 60)
        return f"{big} {small} min" if small else big
    big, small = f"{int(s // 86400)} d", int(s % 86400 // 3600)
    return f"{big} {small} h" if small else big


def fmt_bytes(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``16 MiB``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


def is_json_encoding(encoding: str) -> bool:
    """Whether a payload encoding label means JSON (``application/json``, ``*+json``, ``json``)."""
    label = encoding.split(";", 1)[0].strip().lower()
    return label in ("application/json", "text/json", "json") or label.endswith("+json")


@dataclass(frozen=True, slots=True)
class PayloadView:
    """How the job page shows a payload: ``kind`` is json | text | hex | empty."""

    kind: str
    text: str
    size: int
    truncated: bool


def payload_view(data: bytes, encoding: str) -> PayloadView:
    """Pretty JSON for JSON encodings (when it parses), UTF-8 text when printable, else a hex dump."""
    size = len(data)
    if not data:
        return PayloadView("empty", "", 0, False)
    if is_json_encoding(encoding) and size <= PAYLOAD_SHOWN:
        try:
            return PayloadView("json", json.dumps(json.loads(data), indent=2, ensure_ascii=False), size, False)
        except (ValueError, UnicodeDecodeError):
            pass
    head = data[:PAYLOAD_SHOWN]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if size > PAYLOAD_SHOWN and exc.reason == "unexpected end of data":
            text = head[:exc.start].decode("utf-8")  # a character cut by the display limit
        else:
            return PayloadView("hex", hexdump(data[:HEX_SHOWN]), size, size > HEX_SHOWN)
    if any(ord(c) < 32 and c not in "\n\r\t" for c in text):
        return PayloadView("hex", hexdump(data[:HEX_SHOWN]), size, size > HEX_SHOWN)
    return PayloadView("text", text, size, size > PAYLOAD_SHOWN)


def hexdump(data: bytes) -> str:
    """Classic 16-bytes-a-line dump: offset, hex, printable ASCII."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<47}  {text}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- chart


@dataclass(frozen=True, slots=True)
class Chart:
    """A per-minute throughput line chart, drawn server-side (no JS).

    The SVG (viewBox ``0 0 width height``, stretched to its box) holds only the lines;
    the axis labels are HTML around it so they keep their size on any screen. ``series``
    holds (css class, label, total, points of the complete minutes, points of the last
    segment up to the current, still partial, minute).
    """

    width: int
    height: int
    series: list[tuple[str, str, int, str, str]]
    x_labels: list[str]
    y_labels: list[str]
    grid: list[float]
    summary: str


def build_chart(rows: Sequence[MinuteRow], width: int = 600, height: int = 100) -> Chart:
    """A chart of enqueued / completed / dead-lettered per minute for ``rows`` (oldest first,
    the last one the current minute)."""
    series_values = [("enq", "enqueued", [r.enqueued for r in rows]),
                     ("done", "completed", [r.completed for r in rows]),
                     ("dead", "dead-lettered", [r.dead_lettered for r in rows])]
    peak = max([1, *[v for _, _, vals in series_values for v in vals]])
    # Round the axis up to 1/2/5 × 10^k.
    magnitude: int = 10 ** max(0, len(str(peak)) - 1)
    ceiling = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= peak)
    n = max(1, len(rows) - 1)

    def point(i: int, v: int) -> str:
        return f"{round(width * i / n, 2)},{round(height * (1 - v / ceiling) , 2)}"

    series = []
    for cls, label, vals in series_values:
        whole = " ".join(point(i, v) for i, v in enumerate(vals[:-1]))
        tail = " ".join(point(i, vals[i]) for i in range(max(0, len(vals) - 2), len(vals)))
        series.append((cls, label, sum(vals), whole, tail))
    span = len(rows) - 1
    x_labels = [f"−{round(span * (1 - k / 4))} min" for k in range(4)] + ["now"]
    summary = (f"Last {len(rows)} minutes: " + ", ".join(f"{total:,} {label}" for _, label, total, _, _ in series)
               + f"; at most {peak:,} in one minute.")
    return Chart(width, height, series, x_labels, [f"{ceiling:,}", f"{ceiling // 2:,}", "0"],
                 [0.0, height / 2, float(height)], summary)


def merge_rows(views: Sequence[QueueStatsView]) -> list[MinuteRow]:
    """Sum per-minute rows across queues (the dashboard's all-queues chart)."""
    if not views:
        return []
    out = []
    for i, first in enumerate(views[0].throughput):
        out.append(MinuteRow("", first.minute, sum(v.throughput[i].enqueued for v in views),
                             sum(v.throughput[i].completed for v in views),
                             sum(v.throughput[i].dead_lettered for v in views)))
    return out


# ---------------------------------------------------------------------- enqueue form


class FormError(Exception):
    """A form field could not be turned into its EnqueueRequest field (shown as InvalidArgument)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def parse_custom_value(key: str, type_name: str, raw: str) -> pb.CustomValue:
    """One custom entry of the form → ``CustomValue`` (int64 range checked; NaN/inf left to
    the server, which rejects them as InvalidArgument). Raises ``FormError``."""
    field = f"custom[{key}]"
    if type_name == "string":
        return pb.CustomValue(string_value=raw)
    if type_name == "int":
        try:
            value = int(raw.strip())
        except ValueError:
            raise FormError(field, f"{raw!r} is not an integer") from None
        if not -(2**63) <= value < 2**63:
            raise FormError(field, f"{raw} does not fit in int64")
        return pb.CustomValue(int_value=value)
    if type_name == "float":
        try:
            return pb.CustomValue(float_value=float(raw.strip()))
        except ValueError:
            raise FormError(field, f"{raw!r} is not a number") from None
    if type_name == "bool":
        low = raw.strip().lower()
        if low not in _TRUE | _FALSE:
            raise FormError(field, f"{raw!r} is not a boolean (true/false)")
        return pb.CustomValue(bool_value=low in _TRUE)
    raise FormError(field, f"unknown custom type {type_name!r}")


def parse_payload(text: str, fmt: str) -> bytes:
    """The payload textarea as bytes: UTF-8 text (browser CRLF line ends → LF), base64 or hex."""
    if fmt == "base64":
        try:
            return base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            raise FormError("payload.data", "the payload is not valid base64") from None
    if fmt == "hex":
        try:
            return bytes.fromhex("".join(text.split()))
        except ValueError:
            raise FormError("payload.data", "the payload is not valid hex") from None
    return text.replace("\r\n", "\n").encode("utf-8")


def parse_schedule(local: str, zone: str) -> dt.datetime:
    """``datetime-local`` value + IANA zone name → aware datetime. Raises ``FormError``."""
    try:
        naive = dt.datetime.fromisoformat(local)
    except ValueError:
        raise FormError("scheduled_at", f"{local!r} is not a date and time") from None
    try:
        tz = zoneinfo.ZoneInfo(zone or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise FormError("scheduled_at", f"unknown time zone {zone!r}") from None
    return naive.replace(tzinfo=tz)


def build_request(form: Mapping[str, str], customs: Sequence[tuple[str, str, str]]) -> pb.EnqueueRequest:
    """Map the enqueue form field by field onto an ``EnqueueRequest`` (seed "Enqueue from the
    admin UI"). Empty optional fields stay unset. Raises ``FormError`` for a value that has no
    wire form (not a number, bad base64, unknown zone, …)."""
    req = pb.EnqueueRequest(queue=form.get("queue", ""), job_type=form.get("job_type", ""))
    data = parse_payload(form.get("payload", ""), form.get("payload_format", "text"))
    encoding = form.get("encoding", "")
    if data or encoding:
        req.payload.CopyFrom(pb.Payload(data=data, encoding=encoding))
    for key, type_name, raw in customs:
        if not key and not raw:
            continue
        req.custom[key].CopyFrom(parse_custom_value(key, type_name, raw))
    for name in ("priority", "max_attempts"):
        raw = form.get(name, "").strip()
        if raw:
            try:
                number = int(raw)
            except ValueError:
                raise FormError(name, f"{quote_value(raw)} is not an integer") from None
            try:
                setattr(req, name, number)
            except ValueError:  # beyond int32: the server would refuse it anyway
                raise FormError(name, f"{quote_value(raw)} does not fit in int32") from None
    local = form.get("scheduled_at", "").strip()
    if local:
        zone = form.get("scheduled_tz", "UTC")
        when = parse_schedule(local, zone)
        try:
            req.scheduled_at.FromDatetime(when.astimezone(dt.UTC))
        except (OverflowError, ValueError):  # 9999-12-31T23:59 at UTC−12 is past year 9999 in UTC
            raise FormError("scheduled_at", f"{quote_value(local)} in {quote_value(zone)} is outside "
                                           "0001-01-01 .. 9999-12-31 UTC") from None
    key = form.get("idempotency_key", "")
    if key:
        req.idempotency_key = key
    for name in ("traceparent", "tracestate"):
        value = form.get(name, "").strip()
        if value:
            req.trace_context[name] = value
    return req


def limits_json(info: ppb.ServerInfo) -> dict[str, Any]:
    """The limits the browser checks, from server info (embedded as JSON in the form page)."""

    def lim(q: pb.QueueLimits) -> dict[str, Any]:
        return {"max_payload_bytes": q.max_payload_bytes, "allowed_encodings": list(q.allowed_encodings),
                "max_custom_entries": q.max_custom_entries, "max_custom_key_bytes": q.max_custom_key_bytes,
                "max_custom_bytes": q.max_custom_bytes}

    s = info.limits
    return {
        "strict": info.strict,
        "server": {"max_attempts_ceiling": s.max_attempts_ceiling, "max_queue_name_bytes": s.max_queue_name_bytes,
                   "max_job_type_bytes": s.max_job_type_bytes,
                   "max_schedule_horizon": duration_to_seconds(s.max_schedule_horizon),
                   "max_idempotency_key_bytes": s.max_idempotency_key_bytes,
                   "max_encoding_bytes": s.max_encoding_bytes, "max_trace_entries": s.max_trace_entries,
                   "max_trace_value_bytes": s.max_trace_value_bytes},
        "defaults": lim(info.queue_defaults.limits),
        "queues": {q.name: lim(q.settings.limits) for q in info.queues},
    }


# ---------------------------------------------------------------------- security plumbing


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


def session_secret(token: str | None) -> str:
    """The session-signing key: derived from the admin token, else random per process."""
    if token:
        return hmac.new(token.encode(), b"sepp-ui-session-v1", hashlib.sha256).hexdigest()
    return secrets.token_hex(32)


def safe_next(target: str | None) -> str:
    """A same-site path to go back to after login (``/`` for anything else: no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


# ---------------------------------------------------------------------- the UI


class AdminUI:
    """Routes and helpers of the web UI over an ``AdminEngine``.

    ``server_info`` returns the live ``ServerInfo`` (limits for the enqueue form);
    ``token`` is the admin token (None = no login).
    """

    def __init__(self, admin: AdminEngine, server_info: Callable[[], ppb.ServerInfo], token: str | None) -> None:
        self.admin = admin
        self.server_info = server_info
        self.token = token or None
        self._auth_marker = (hashlib.sha256(b"sepp-ui-auth:" + self.token.encode()).hexdigest()[:32]
                             if self.token else "")
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                                 undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        env.filters.update(time=fmt_time, iso=fmt_iso, duration=fmt_duration, bytes=fmt_bytes,
                           qurl=lambda name: quote(str(name), safe=""), state=state_name,
                           slug=lambda s: _SLUG_OF.get(int(s), ""), number=lambda n: f"{n:,}",
                           uuid=job_id_text)
        env.globals.update(POLL_SECONDS=POLL_SECONDS, HTMX=HTMX, STATE_SLUGS=_STATE_SLUGS)
        self.templates = Jinja2Templates(env=env)

    # ------------------------------------------------------------------ plumbing

    def routes(self) -> list[BaseRoute]:
        """Every UI route (mount them on the HTTP app)."""
        page, post = self._page, self._post
        return [
            Route("/", page(self.dashboard)),
            Route("/ui/partials/dashboard", page(self.dashboard_partial)),
            Route("/queues/{name}", page(self.queue_page)),
            Route("/ui/partials/queue/{name}", page(self.queue_partial)),
            Route("/queues/{name}/pause", post(self.queue_pause), methods=["POST"]),
            Route("/queues/{name}/resume", post(self.queue_resume), methods=["POST"]),
            Route("/queues/{name}/purge", post(self.queue_purge), methods=["POST"]),
            Route("/jobs/{job_id}", page(self.job_page)),
            Route("/jobs/{job_id}/cancel", post(self.job_cancel), methods=["POST"]),
            Route("/jobs/{job_id}/requeue", post(self.job_requeue), methods=["POST"]),
            Route("/jobs/{job_id}/delete", post(self.job_delete), methods=["POST"]),
            Route("/dead", page(self.dead_page)),
            Route("/dead/requeue", post(self.dead_requeue), methods=["POST"]),
            Route("/enqueue", page(self.enqueue_page)),
            Route("/enqueue", post(self.enqueue_submit), methods=["POST"]),
            Route("/find", page(self.find)),
            Route("/login", self._open(self.login_page)),
            Route("/login", self._open_post(self.login_submit), methods=["POST"]),
            Route("/logout", post(self.logout), methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
        ]

    def middleware(self) -> list[Middleware]:
        """Session (signed cookie) and security headers."""
        return [Middleware(SecurityHeaders),
                Middleware(SessionMiddleware, secret_key=session_secret(self.token), session_cookie="sepp_session",
                           max_age=12 * 3600, same_site="lax")]

    @staticmethod
    def csrf_token(request: Request) -> str:
        """The session's CSRF token (created on first use)."""
        token = request.session.get("csrf")
        if not isinstance(token, str) or len(token) < 32:
            token = secrets.token_urlsafe(32)
            request.session["csrf"] = token
        return token

    def _authed(self, request: Request) -> bool:
        if self.token is None:
            return True
        marker = request.session.get("auth")
        return isinstance(marker, str) and hmac.compare_digest(marker, self._auth_marker)

    def _login_redirect(self, request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        url = "/login?" + urlencode({"next": target})
        if request.headers.get("HX-Request"):
            return Response(status_code=200, headers={"HX-Redirect": url})
        return RedirectResponse(url, status_code=303)

    def _page(self, handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            if not self._authed(request):
                return self._login_redirect(request)
            return await self._guard(handler, request)

        return wrapped

    def _post(self, handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            if not await self._csrf_ok(request):
                return self.render(request, "error.html", {"title": "Forbidden", "message":
                                   "This form is stale or was not sent by the sepp UI (CSRF token missing or "
                                   "wrong). Reload the page and try again."}, 403)
            if not self._authed(request):
                return self._login_redirect(request)
            return await self._guard(handler, request)

        return wrapped

    def _open(self, handler: Handler) -> Handler:
        return handler

    def _open_post(self, handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            if not await self._csrf_ok(request):
                return self.render(request, "error.html", {"title": "Forbidden", "message":
                                   "CSRF token missing or wrong. Reload the page and try again."}, 403)
            return await handler(request)

        return wrapped

    async def _form(self, request: Request) -> FormData:
        """The parsed form; a field may be as large as a whole gRPC message in base64 (the
        payload textarea), beyond python-multipart's 1 MiB default."""
        cap = self.admin.engine.limits.max_message_bytes * 2
        return await request.form(max_part_size=cap)

    async def _csrf_ok(self, request: Request) -> bool:
        expected = request.session.get("csrf")
        if not isinstance(expected, str) or not expected:
            return False
        presented = request.headers.get("x-csrf-token", "")
        if not presented:
            form = await self._form(request)
            value = form.get("csrf_token", "")
            presented = value if isinstance(value, str) else ""
        return hmac.compare_digest(presented.encode(), expected.encode())

    async def _guard(self, handler: Handler, request: Request) -> Response:
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
        base = {"csrf": self.csrf_token(request), "flashes": flashes, "auth_on": self._authed(request)
                and self.token is not None, "path": request.url.path}
        return self.templates.TemplateResponse(request, name, {**base, **context}, status_code=status)

    @staticmethod
    def flash(request: Request, text: str, level: str = "ok") -> None:
        """Queue a message for the next page."""
        request.session.setdefault("flash", []).append([level, text])

    # ------------------------------------------------------------------ dashboard

    async def _dashboard_context(self) -> dict[str, Any]:
        views = await self.admin.stats()
        totals = {f: sum(getattr(v.counts, f) for v in views) for f in
                  ("scheduled", "ready", "reserved", "completed", "dead_lettered", "cancelled")}
        chart = build_chart(merge_rows(views)) if views else None
        return {"views": views, "totals": totals, "chart": chart}

    async def dashboard(self, request: Request) -> Response:
        """The dashboard page."""
        return self.render(request, "dashboard.html", {"title": "Dashboard", **await self._dashboard_context()})

    async def dashboard_partial(self, request: Request) -> Response:
        """The dashboard body for htmx polling."""
        return self.render(request, "_dashboard.html", await self._dashboard_context())

    # ------------------------------------------------------------------ queue

    async def _queue_stats(self, name: str) -> tuple[QueueStatsView, Chart]:
        view = (await self.admin.stats([name]))[0]
        return view, build_chart(view.throughput)

    async def queue_page(self, request: Request) -> Response:
        """Settings, counts, chart and the jobs of one state (``?state=ready&page=<token>``)."""
        name = request.path_params["name"]
        q = self.admin.queue(name)
        slug = request.query_params.get("state", "ready")
        state = _STATE_SLUGS.get(slug, int(State.READY))
        token = request.query_params.get("page", "")
        job_type = request.query_params.get("job_type", "") or None
        listing = await self.admin.list_jobs(JobQuery(queue=name, state=state, job_type=job_type), token, 50)
        view, chart = await self._queue_stats(name)
        return self.render(request, "queue.html", {
            "title": f"Queue {name}", "q": q, "view": view, "chart": chart, "state": state, "slug": _SLUG_OF[state],
            "jobs": listing.jobs, "next_token": listing.next_token, "paged": bool(token), "job_type": job_type or "",
            "settings": settings_rows(q.settings.model_dump())})

    async def queue_partial(self, request: Request) -> Response:
        """Live counts and chart of one queue."""
        name = request.path_params["name"]
        self.admin.queue(name)
        view, chart = await self._queue_stats(name)
        slug = request.query_params.get("state", "ready")
        return self.render(request, "_queue_stats.html", {"view": view, "chart": chart,
                                                          "state": _STATE_SLUGS.get(slug, 2), "q_name": name})

    async def queue_pause(self, request: Request) -> Response:
        """Pause the queue."""
        name = request.path_params["name"]
        await self.admin.set_paused(name, True)
        self.flash(request, f"Queue {name} paused: workers get nothing from it until it is resumed.")
        return RedirectResponse(f"/queues/{quote(name, safe='')}", status_code=303)

    async def queue_resume(self, request: Request) -> Response:
        """Resume the queue."""
        name = request.path_params["name"]
        await self.admin.set_paused(name, False)
        self.flash(request, f"Queue {name} resumed.")
        return RedirectResponse(f"/queues/{quote(name, safe='')}", status_code=303)

    async def queue_purge(self, request: Request) -> Response:
        """Delete the queue's jobs in the ticked states."""
        name = request.path_params["name"]
        form = await self._form(request)
        states = [_STATE_SLUGS[s] for s in form.getlist("states") if isinstance(s, str) and s in _STATE_SLUGS]
        if not states:
            self.flash(request, "Nothing purged: tick at least one state.", "warn")
        else:
            n = await self.admin.purge(name, states)
            labels = ", ".join(state_name(s) for s in states)
            self.flash(request, f"Purged {n:,} job(s) ({labels}) from {name}.")
        return RedirectResponse(f"/queues/{quote(name, safe='')}", status_code=303)

    # ------------------------------------------------------------------ job

    async def job_page(self, request: Request) -> Response:
        """Every field of one job."""
        rec = await self.admin.get_job(request.path_params["job_id"])
        return self.render(request, "job.html", job_context(rec))

    async def _job_action(self, request: Request, verb: str) -> Response:
        job_id = request.path_params["job_id"]
        url = f"/jobs/{quote(job_id, safe='')}"
        try:
            if verb == "cancel":
                form = await self._form(request)
                reason = form.get("reason", "")
                rec = await self.admin.cancel(job_id, reason if isinstance(reason, str) else "")
                if rec.state == int(State.RESERVED):
                    self.flash(request, "Cancel requested: the worker holding the job learns it on its next "
                                        "lease extension.")
                else:
                    self.flash(request, "Job cancelled.")
            elif verb == "requeue":
                await self.admin.requeue(job_id)
                self.flash(request, "Job requeued: READY again with attempt 0 (history kept).")
            else:
                rec = await self.admin.get_job(job_id)
                await self.admin.delete_job(job_id)
                self.flash(request, f"Job {job_id} deleted.")
                return RedirectResponse(f"/queues/{quote(rec.queue, safe='')}", status_code=303)
        except StateConflict as exc:
            self.flash(request, str(exc), "error")
        return RedirectResponse(url, status_code=303)

    async def job_cancel(self, request: Request) -> Response:
        """Cancel (or request cancellation of) the job."""
        return await self._job_action(request, "cancel")

    async def job_requeue(self, request: Request) -> Response:
        """Redrive the job."""
        return await self._job_action(request, "requeue")

    async def job_delete(self, request: Request) -> Response:
        """Delete the job."""
        return await self._job_action(request, "delete")

    # ------------------------------------------------------------------ dead letters

    @staticmethod
    def _dead_filter(params: Mapping[str, Any]) -> tuple[DeadFilter, dict[str, str]]:
        raw = {k: str(params.get(k, "") or "").strip() for k in ("queue", "job_type", "reason", "after", "before")}

        def when(text: str, field: str) -> int | None:
            if not text:
                return None
            try:
                moment = dt.datetime.fromisoformat(text)
            except ValueError:
                raise InvalidRequest(f"{field}: {text!r} is not a date and time (UTC)", field) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
            return int(moment.timestamp() * 1_000_000)

        where = DeadFilter(queue=raw["queue"] or None, job_type=raw["job_type"] or None,
                           reason_prefix=raw["reason"] or None, after=when(raw["after"], "after"),
                           before=when(raw["before"], "before"))
        return where, raw

    async def dead_page(self, request: Request) -> Response:
        """Dead letters with filters, the dry-run count and a bulk requeue form."""
        where, raw = self._dead_filter(request.query_params)
        matched, _ = await self.admin.requeue_dead(where, dry_run=True)
        query = JobQuery(queue=where.queue, state=int(State.DEAD_LETTERED), job_type=where.job_type,
                         reason_prefix=where.reason_prefix, finished_after=where.after, finished_before=where.before)
        token = request.query_params.get("page", "")
        listing = await self.admin.list_jobs(query, token, 50)
        keep = {k: v for k, v in raw.items() if v}
        next_url = "/dead?" + urlencode({**keep, "page": listing.next_token}) if listing.next_token else ""
        return self.render(request, "dead.html", {
            "title": "Dead letters", "f": raw, "matched": matched, "jobs": listing.jobs, "next_url": next_url,
            "first_url": "/dead?" + urlencode(keep) if token else "", "queue_names": [q.name for q in
                                                                                    self.admin.queues()]})

    async def dead_requeue(self, request: Request) -> Response:
        """Requeue every dead letter matching the posted filter."""
        form = await self._form(request)
        where, raw = self._dead_filter({k: v for k, v in form.items() if isinstance(v, str)})
        matched, done = await self.admin.requeue_dead(where)
        self.flash(request, f"Requeued {done:,} of {matched:,} matching dead-lettered job(s).")
        keep = {k: v for k, v in raw.items() if v}
        return RedirectResponse("/dead?" + urlencode(keep), status_code=303)

    # ------------------------------------------------------------------ enqueue

    def _enqueue_context(self, values: Mapping[str, str], customs: Sequence[tuple[str, str, str]],
                         **extra: Any) -> dict[str, Any]:
        info = self.server_info()
        rows = list(customs) or [("", "string", "")]
        return {"title": "Enqueue", "v": values, "customs": rows, "limits": limits_json(info),
                "queue_names": [q.name for q in info.queues], "strict": info.strict,
                "zones": sorted(zoneinfo.available_timezones()), "result": None, "rejection": None,
                "form_error": None, **extra}

    async def enqueue_page(self, request: Request) -> Response:
        """The empty enqueue form (``?queue=`` pre-fills the queue)."""
        values = {"queue": request.query_params.get("queue", ""), "payload_format": "text",
                  "encoding": "application/json", "scheduled_tz": "UTC"}
        return self.render(request, "enqueue.html", self._enqueue_context(values, []))

    async def enqueue_submit(self, request: Request) -> Response:
        """Build the EnqueueRequest, call ``JobEngine.enqueue`` in-process, show the ack or the rejection."""
        form = await self._form(request)
        values = {k: v for k, v in form.items() if isinstance(v, str) and not k.startswith("custom_")}
        keys, types, raws = (form.getlist(n) for n in ("custom_key", "custom_type", "custom_value"))
        customs = [(str(k), str(t), str(r)) for k, t, r in zip(keys, types, raws, strict=False)]
        status = 200
        try:
            req = build_request(values, customs)
            ack = await self.admin.engine.enqueue(req)
            ctx = self._enqueue_context(values, customs, result={"job_id": ack.job_id,
                                                                  "deduplicated": ack.deduplicated})
        except FormError as exc:
            status = 400
            ctx = self._enqueue_context(values, customs, rejection={
                "code": RejectionCode.INVALID_ARGUMENT.value, "message": str(exc), "field": exc.field,
                "limit": None, "actual": None, "local": True})
        except JobRejected as exc:
            status = 400 if exc.rejection.code != RejectionCode.UNKNOWN_QUEUE.to_wire() else 404
            r = exc.rejection
            ctx = self._enqueue_context(values, customs, rejection={
                "code": RejectionCode.from_wire(r.code).value, "message": r.message, "field": r.field,
                "limit": r.limit if r.HasField("limit") else None,
                "actual": r.actual if r.HasField("actual") else None, "local": False})
        except Overloaded as exc:
            status = 503
            ctx = self._enqueue_context(values, customs, form_error=f"The server is overloaded (commit backlog "
                                        f"{exc.backlog:,}); nothing was stored. Retry in a moment.")
        except EngineError as exc:
            status = 500
            ctx = self._enqueue_context(values, customs, form_error=str(exc))
        return self.render(request, "enqueue.html", ctx, status)

    # ------------------------------------------------------------------ search

    async def find(self, request: Request) -> Response:
        """``?q=<job id>`` or ``?queue=&key=`` → the job's page."""
        text = request.query_params.get("q", "").strip()
        queue = request.query_params.get("queue", "").strip()
        key = request.query_params.get("key", "")
        if queue and key:
            job_id, expires, job = await self.admin.find_by_key(queue, key)
            if job is None:
                return self.render(request, "error.html", {"title": "Job gone", "message":
                                   f"The key still points at job {job_id} (until {fmt_time(expires)}), but that "
                                   "job was deleted or purged."}, 404)
            return RedirectResponse(f"/jobs/{job_id}", status_code=303)
        if text:
            rec = await self.admin.get_job(text)
            return RedirectResponse(f"/jobs/{job_id_text(rec.id)}", status_code=303)
        return self.render(request, "error.html", {"title": "Find a job", "message":
                           "Enter a job id, or a queue and an idempotency key."}, 400)

    # ------------------------------------------------------------------ login

    async def login_page(self, request: Request) -> Response:
        """The token form (or straight through when no token is configured)."""
        nxt = safe_next(request.query_params.get("next"))
        if self._authed(request):
            return RedirectResponse(nxt, status_code=303)
        return self.render(request, "login.html", {"title": "Log in", "next": nxt, "error": ""})

    async def login_submit(self, request: Request) -> Response:
        """Check the token (constant time); on success mark the session and go back."""
        form = await self._form(request)
        nxt = safe_next(str(form.get("next", "/")))
        presented = str(form.get("token", ""))
        if self.token is None:
            return RedirectResponse(nxt, status_code=303)
        if not hmac.compare_digest(presented.encode(), self.token.encode()):
            return self.render(request, "login.html", {"title": "Log in", "next": nxt,
                                                       "error": "That is not the admin token."}, 401)
        request.session.clear()
        request.session["auth"] = self._auth_marker
        request.session["csrf"] = secrets.token_urlsafe(32)
        return RedirectResponse(nxt, status_code=303)

    async def logout(self, request: Request) -> Response:
        """Forget the session."""
        request.session.clear()
        return RedirectResponse("/login" if self.token else "/", status_code=303)


def settings_rows(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Queue settings as (label, human value) rows; durations in seconds → readable."""
    rows = []
    for key, value in settings.items():
        if key == "limits":
            for lkey, lvalue in value.items():
                shown = ", ".join(lvalue) or "any" if lkey == "allowed_encodings" else (
                    fmt_bytes(lvalue) if lkey.endswith("_bytes") else f"{lvalue:,}")
                rows.append((f"limits.{lkey}", shown))
        elif key in ("lease_duration", "dedup_window", "retry_base", "retry_cap", "completed_retention",
                     "dead_letter_retention"):
            rows.append((key, fmt_duration(float(value))))
        elif key == "retry_jitter":
            rows.append((key, f"±{float(value) * 100:g}%"))
        else:
            rows.append((key, str(value)))
    return rows


def job_context(rec: JobRecord) -> dict[str, Any]:
    """Everything the job page shows of a record."""
    job = job_to_proto(rec)
    custom = []
    for key in sorted(job.custom):
        value = job.custom[key]
        kind = custom_type_name(value)
        raw = getattr(value, value.WhichOneof("kind") or "string_value")
        shown = ("true" if raw else "false") if kind == "bool" else (repr(raw) if kind == "float" else str(raw))
        if kind == "float" and not math.isfinite(raw):
            shown = str(raw)
        custom.append((key, kind, shown))
    attempts = []
    for a in rec.attempt_entries():
        started, ended = a.get("started_at"), a.get("ended_at")
        took = (ended - started) / 1e6 if started is not None and ended is not None else None
        attempts.append({**a, "took": took})
    return {"title": f"Job {job.id}", "job": job, "rec": rec, "payload": payload_view(rec.payload, rec.encoding),
            "custom": custom, "trace": sorted(job.trace_context.items()), "attempts": attempts,
            "state_name": state_name(rec.state), "can_cancel": rec.state in (1, 2, 3) and not rec.cancel_requested,
            "can_requeue": rec.state in (5, 6)}
