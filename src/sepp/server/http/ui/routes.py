"""The UI's handlers and route table: ``AdminUI`` over an ``AdminEngine``.

Formatting lives in ``views`` and ``chart``, form parsing in ``forms``, CSRF / session /
headers in ``security``; this module only maps requests to engine calls and templates.
"""

from __future__ import annotations

import functools
import secrets
import zoneinfo
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from sepp.api.v1 import producer_pb2 as ppb
from sepp.domain.ids import job_id_text
from sepp.rejections import RejectionCode
from sepp.server.admin import AdminEngine, QueueStatsView, StateConflict, state_name
from sepp.server.admin.search import parse_search
from sepp.server.auth import Authenticator
from sepp.server.cluster import HEARTBEAT_EVERY, NODE_GONE_AFTER
from sepp.server.engine import JobEngine
from sepp.server.errors import EngineError, InvalidRequest, JobRejected, NotFound, Overloaded
from sepp.server.http.ui.bulk import BulkUI, actions_for
from sepp.server.http.ui.chart import WINDOWS, Chart, Window, build_chart, merge_rows, window_param
from sepp.server.http.ui.figures_view import fmt_runtime
from sepp.server.http.ui.forms import (
    FormError,
    build_request,
    dead_filter,
    fresh_idempotency_key,
    limits_json,
    read_form,
)
from sepp.server.http.ui.lists import ListPages
from sepp.server.http.ui.periodic import PeriodicPages
from sepp.server.http.ui.security import (
    SecurityHeaders,
    csrf_ok,
    csrf_token,
    is_authed,
    safe_next,
    session_secret,
)
from sepp.server.http.ui.views import (
    SLUG_OF,
    STATE_FIELD,
    STATE_SLUGS,
    first_state_with_jobs,
    fmt_ago,
    fmt_bytes,
    fmt_duration,
    fmt_iso,
    fmt_time,
    job_context,
    node_views,
    settings_rows,
    state_param,
    storage_label,
)
from sepp.server.parts import ServerParts
from sepp.storage.admin import JobQuery
from sepp.storage.base import State
from sepp.storage.errors import StoreError

#: Templates and static files stay next to the package (``sepp/server/http/``).
HTTP_DIR = Path(__file__).parent.parent
TEMPLATES = HTTP_DIR / "templates"
STATIC = HTTP_DIR / "static"
#: Most rows the Workers page shows (live ones first; the rest are counted).
WORKERS_SHOWN = 200
HTMX = "vendor/htmx.org/htmx.min.js"

#: Dashboard refresh period, seconds.
POLL_SECONDS = 5
#: The job-type figures' refresh period on the queue page, seconds.
TYPES_POLL_SECONDS = 15

Handler = Callable[[Request], Awaitable[Response]]


class AdminUI:
    """Routes and helpers of the web UI over an ``AdminEngine``.

    ``server_info`` returns the live ``ServerInfo`` (limits for the enqueue form);
    ``auth`` holds the tokens: when admin is checked the UI logs in with any token
    that has role ``admin``, else it is open.
    """

    def __init__(self, parts: ServerParts, engine: JobEngine, admin: AdminEngine,
                 server_info: Callable[[], ppb.ServerInfo], auth: Authenticator) -> None:
        self.parts = parts
        self.engine = engine
        self.admin = admin
        self.server_info = server_info
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
                           TYPES_POLL_SECONDS=TYPES_POLL_SECONDS)
        self.templates = Jinja2Templates(env=env)
        #: Bulk cancel / requeue / delete (``ui.bulk``).
        self.bulk_ui = BulkUI(self)

    # ------------------------------------------------------------------ plumbing

    def routes(self) -> list[BaseRoute]:
        """Every UI route (mount them on the HTTP app)."""
        page, post = self._page, self._post
        return [
            Route("/", page(self.dashboard)),
            Route("/queues", self._open(self.queues_index)),
            Route("/ui/partials/dashboard", page(self.dashboard_partial)),
            Route("/queues/{name}", page(self.queue_page)),
            Route("/ui/partials/queue/{name}", page(self.queue_partial)),
            Route("/ui/partials/queue/{name}/types", page(self.queue_types_partial)),
            *self.bulk_ui.routes(),
            Route("/queues/{name}/pause", post(self.queue_pause), methods=["POST"]),
            Route("/queues/{name}/resume", post(self.queue_resume), methods=["POST"]),
            Route("/queues/{name}/purge", post(self.queue_purge), methods=["POST"]),
            *ListPages(self).routes(),
            Route("/jobs/{job_id}", page(self.job_page)),
            Route("/jobs/{job_id}/cancel", post(self.job_cancel), methods=["POST"]),
            Route("/jobs/{job_id}/requeue", post(self.job_requeue), methods=["POST"]),
            Route("/jobs/{job_id}/delete", post(self.job_delete), methods=["POST"]),
            Route("/dead", page(self.dead_page)),
            Route("/dead/requeue", post(self.dead_requeue), methods=["POST"]),
            Route("/enqueue", page(self.enqueue_page)),
            Route("/enqueue", post(self.enqueue_submit), methods=["POST"]),
            Route("/workers", page(self.workers_page)),
            Route("/ui/partials/workers", page(self.workers_partial)),
            *PeriodicPages(self).routes(),
            Route("/nodes", page(self.nodes_page)),
            Route("/ui/partials/nodes", page(self.nodes_partial)),
            Route("/find", page(self.find)),
            Route("/search", page(self.search)),
            Route("/login", self._open(self.login_page)),
            Route("/login", self._open_post(self.login_submit), methods=["POST"]),
            Route("/logout", post(self.logout), methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
            Route("/favicon.ico", self._open(self.favicon)),
        ]

    def middleware(self) -> list[Middleware]:
        """Session (signed cookie) and security headers."""
        return [Middleware(SecurityHeaders),
                Middleware(SessionMiddleware, secret_key=session_secret(self.auth), session_cookie="sepp_session",
                           max_age=12 * 3600, same_site="lax",
                           # Served over TLS: the cookie never travels in clear.
                           https_only=bool(self.parts.config.tls_cert))]

    csrf_token = staticmethod(csrf_token)

    def _authed(self, request: Request) -> bool:
        return is_authed(request, self.auth)

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
        """The parsed form (``forms.read_form`` with the server's message limit)."""
        return await read_form(request, self.parts.limits.max_message_bytes)

    async def _csrf_ok(self, request: Request) -> bool:
        return await csrf_ok(request, self._form)

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
                and self.login_on, "path": request.url.path}
        return self.templates.TemplateResponse(request, name, {**base, **context}, status_code=status)

    @staticmethod
    def flash(request: Request, text: str, level: str = "ok") -> None:
        """Queue a message for the next page."""
        request.session.setdefault("flash", []).append([level, text])

    # ------------------------------------------------------------------ dashboard

    async def _dashboard_context(self, request: Request) -> dict[str, Any]:
        window = window_param(request.query_params.get("window"))
        views = await self.admin.stats(minutes=window.minutes)
        totals = {f: sum(getattr(v.counts, f) for v in views) for f in
                  ("scheduled", "ready", "reserved", "completed", "dead_lettered", "cancelled")}
        chart = build_chart(merge_rows(views), window) if views else None
        return {"views": views, "totals": totals, "chart": chart, "window": window, "WINDOWS": WINDOWS}

    async def dashboard(self, request: Request) -> Response:
        """The dashboard page (``?window=1h|6h|24h`` for the chart)."""
        return self.render(request, "dashboard.html",
                           {"title": "Dashboard", **await self._dashboard_context(request)})

    async def dashboard_partial(self, request: Request) -> Response:
        """The dashboard body for htmx polling."""
        return self.render(request, "_dashboard.html", await self._dashboard_context(request))

    # ------------------------------------------------------------------ queue

    async def _queue_stats(self, name: str, window: Window) -> tuple[QueueStatsView, Chart]:
        view = (await self.admin.stats([name], minutes=window.minutes))[0]
        return view, build_chart(view.throughput, window)

    async def queue_page(self, request: Request) -> Response:
        """Settings, counts, chart and the jobs of one state
        (``?state=ready&page=<token>&window=1h|6h|24h``; without ``state`` the first state,
        in tab order, that has jobs)."""
        name = request.path_params["name"]
        q = self.admin.queue(name)
        window = window_param(request.query_params.get("window"))
        view, chart = await self._queue_stats(name, window)
        # Without ?state= the page opens on the first state that has jobs (READY when none has).
        state = state_param(request.query_params.get("state"), first_state_with_jobs(view.counts))
        token = request.query_params.get("page", "")
        job_type = request.query_params.get("job_type", "") or None
        listing = await self.admin.list_jobs(JobQuery(queue=name, state=state, job_type=job_type), token, 50)
        return self.render(request, "queue.html", {
            "title": f"Queue {name}", "q": q, "view": view, "chart": chart, "state": state, "slug": SLUG_OF[state],
            "jobs": listing.jobs, "next_token": listing.next_token, "paged": bool(token), "job_type": job_type or "",
            "settings": settings_rows(q.settings.model_dump()), "types": await self.admin.type_figures(name),
            "q_name": name, "bulk_actions": actions_for(state)})

    async def queue_types_partial(self, request: Request) -> Response:
        """The queue's job-type figures for htmx polling."""
        name = request.path_params["name"]
        return self.render(request, "_job_types.html", {"types": await self.admin.type_figures(name),
                                                         "q_name": name})

    async def queue_partial(self, request: Request) -> Response:
        """Live counts and chart of one queue."""
        name = request.path_params["name"]
        self.admin.queue(name)
        view, chart = await self._queue_stats(name, window_param(request.query_params.get("window")))
        return self.render(request, "_queue_stats.html", {"view": view, "chart": chart,
                                                          "state": state_param(request.query_params.get("state")),
                                                          "q_name": name})

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
        states = [state_param(s) for s in form.getlist("states") if isinstance(s, str) and s.strip()]
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

    async def dead_page(self, request: Request) -> Response:
        """Dead letters with filters, the dry-run count, a requeue form for every match, and
        per-row checkboxes to requeue or delete exactly the ticked jobs (``/jobs/bulk``)."""
        where, raw = dead_filter(request.query_params)
        matched, _ = await self.admin.requeue_dead(where, dry_run=True)
        query = JobQuery(queue=where.queue, state=int(State.DEAD_LETTERED), job_type=where.job_type,
                         reason_prefix=where.reason_prefix, finished_after=where.after, finished_before=where.before)
        token = request.query_params.get("page", "")
        listing = await self.admin.list_jobs(query, token, 50)
        keep = {k: v for k, v in raw.items() if v}
        next_url = "/dead?" + urlencode({**keep, "page": listing.next_token}) if listing.next_token else ""
        here = "/dead?" + urlencode({**keep, **({"page": token} if token else {})})
        return self.render(request, "dead.html", {
            "title": "Dead letters", "f": raw, "matched": matched, "jobs": listing.jobs, "next_url": next_url,
            "here": here,
            "first_url": "/dead?" + urlencode(keep) if token else "", "queue_names": [q.name for q in
                                                                                    self.admin.queues()]})

    async def dead_requeue(self, request: Request) -> Response:
        """Requeue every dead letter matching the posted filter."""
        form = await self._form(request)
        where, raw = dead_filter({k: v for k, v in form.items() if isinstance(v, str)})
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
        """The enqueue form (``?queue=`` pre-fills the queue) with a fresh idempotency key, so
        submitting one loaded form twice stores one job."""
        values = {"queue": request.query_params.get("queue", ""), "payload_format": "text",
                  "encoding": "application/json", "scheduled_tz": "UTC", "payload": "{}",
                  "idempotency_key": fresh_idempotency_key()}
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
            ack = await self.engine.enqueue(req)
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

    # ------------------------------------------------------------------ nodes

    async def _nodes_context(self) -> dict[str, Any]:
        parts = self.parts
        cfg = parts.config
        try:  # read at once: parts.nodes is as old as this node's last heartbeat (up to 5 s)
            parts.nodes = await parts.store.nodes()
        except StoreError:  # the database is away: show what was last read
            pass
        nodes = node_views(parts.nodes, parts.clock.now(), parts.node, NODE_GONE_AFTER)
        return {"nodes": nodes, "this_node": parts.node, "gone_after": NODE_GONE_AFTER,
                "heartbeat_every": HEARTBEAT_EVERY,
                "storage": storage_label(cfg.storage, cfg.postgres.schema, str(cfg.data_dir), cfg.persist_mode)}

    async def nodes_page(self, request: Request) -> Response:
        """The nodes sharing the store: name, address, version, started, last seen
        (gone after ``NODE_GONE_AFTER`` s without a heartbeat), and the storage backend."""
        return self.render(request, "nodes.html", {"title": "Nodes", **(await self._nodes_context())})

    async def nodes_partial(self, request: Request) -> Response:
        """The nodes table for htmx polling."""
        return self.render(request, "_nodes.html", await self._nodes_context())

    # ------------------------------------------------------------------ workers

    async def _workers_context(self) -> dict[str, Any]:
        workers = await self.admin.workers()
        quiet = sum(w.quiet for w in workers)
        stopped = sum(bool(w.stopped_at) for w in workers)
        # At most WORKERS_SHOWN rows (worker ids are caller input; the page polls every few s).
        return {"workers": workers[:WORKERS_SHOWN], "total": len(workers), "quiet": quiet, "stopped": stopped,
                "live": len(workers) - quiet - stopped, "now": self.parts.clock.now(),
                "heartbeat_every": HEARTBEAT_EVERY}

    async def workers_page(self, request: Request) -> Response:
        """Every worker that called within the last hour, on any node: id, status
        (quiet = no call within two lease periods), host, queues, concurrency, jobs in flight,
        last reserve, jobs done and failed in the last minute, nodes, client version."""
        return self.render(request, "workers.html", {"title": "Workers", **(await self._workers_context())})

    async def workers_partial(self, request: Request) -> Response:
        """The workers table for htmx polling."""
        return self.render(request, "_workers.html", await self._workers_context())

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

    async def search(self, request: Request) -> Response:
        """``/search?q=<search>&page=<token>&seen=<n>``: the search box's
        results (syntax: ``sepp.server.admin.search``). A search for one job id alone goes to
        the job's page; text that cannot be read is shown with its message (400).

        A page examines at most ``search_scan_rows`` jobs (config); one that stops there says
        how far the search has looked — ``seen`` carries the jobs examined by the pages
        before — out of about how many (``_search_total``), and links to the next stretch."""
        text = request.query_params.get("q", "").strip()
        token = request.query_params.get("page", "")
        scan_rows = self.parts.config.search_scan_rows
        context: dict[str, Any] = {"title": "Search", "q": text, "scan_rows": scan_rows, "error": "",
                                   "searched": False, "jobs": [], "state": None, "limited": False,
                                   "next_url": "", "first_url": "", "examined": 0, "total": None}
        if not text:
            return self.render(request, "search.html", context)
        try:
            spec = parse_search(text)
            query = spec.query(self.parts.limits.max_idempotency_key_bytes)
            if spec.only_id and not token:
                rec = await self.admin.get_job(spec.job_id)
                return RedirectResponse(f"/jobs/{job_id_text(rec.id)}", status_code=303)
            listing = await self.admin.list_jobs(query, token, 50)
        except InvalidRequest as exc:
            return self.render(request, "search.html", {**context, "error": str(exc)}, 400)
        except NotFound:
            listing = None
        seen = request.query_params.get("seen", "")
        examined = (int(seen) if seen.isascii() and seen.isdigit() and len(seen) < 16 else 0) if token else 0
        examined += listing.examined if listing is not None else 0
        next_url = "/search?" + urlencode({"q": text, "page": listing.next_token, "seen": examined}) \
            if listing is not None and listing.next_token else ""
        total = await self._search_total(query) if listing is not None and listing.next_token else None
        return self.render(request, "search.html", {
            **context, "searched": True, "jobs": listing.jobs if listing else [], "state": spec.state,
            "limited": bool(listing and listing.scan_limited), "next_url": next_url, "examined": examined,
            "total": None if total is None else max(total, examined),
            "first_url": "/search?" + urlencode({"q": text}) if token else ""})

    async def _search_total(self, query: JobQuery) -> int | None:
        """About how many jobs a search walks in all, for "examined N of ~M": the jobs of its
        state (of its queue when it names one), or every stored job for a search over every
        state (that walk covers every queue). None for a search an index drives (id, key,
        custom entry): it walks only the jobs that have what is searched."""
        if query.indexed:
            return None
        if query.state is None:
            return (await self.admin.state_totals()).total
        counts = await self.admin.state_totals(query.queue)
        return int(getattr(counts, STATE_FIELD.get(query.state, "ready"), 0))

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
        if self._authed(request):
            return RedirectResponse(nxt, status_code=303)
        return self.render(request, "login.html", {"title": "Log in", "next": nxt, "error": ""})

    async def login_submit(self, request: Request) -> Response:
        """Check the token (SHA-256, constant time against every configured digest); a token
        with role ``admin`` marks the session (its name and ``Token.marker``) and goes back; an
        unknown one or one without ``admin`` is refused (401 / 403) and counted like a gRPC
        auth failure."""
        form = await self._form(request)
        nxt = safe_next(str(form.get("next", "/")))
        presented = str(form.get("token", "")).strip()
        if not self.login_on:
            return RedirectResponse(nxt, status_code=303)
        token = self.auth.identify(presented)
        if token is None:
            self.auth.failed("missing" if not presented else "unknown", "web UI login with "
                             + ("no token" if not presented else "an unknown token"), method="/login", role="admin")
            return self.render(request, "login.html", {"title": "Log in", "next": nxt, "error":
                               "That is not the admin token (nor any token this server knows)."}, 401)
        if "admin" not in token.roles:
            self.auth.failed("forbidden", f"web UI login with token {token.name!r}, which lacks role admin",
                             method="/login", role="admin", token=token.name)
            return self.render(request, "login.html", {"title": "Log in", "next": nxt, "error":
                               f"Token {token.name!r} does not have role 'admin', which the web UI needs."}, 403)
        request.session.clear()
        request.session["auth"] = token.name
        request.session["marker"] = token.marker
        request.session["csrf"] = secrets.token_urlsafe(32)
        return RedirectResponse(nxt, status_code=303)

    async def logout(self, request: Request) -> Response:
        """Forget the session."""
        request.session.clear()
        return RedirectResponse("/login" if self.login_on else "/", status_code=303)
