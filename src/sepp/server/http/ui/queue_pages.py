"""The UI's dashboard and queue pages.

==========================================  ================================================
``GET /`` (``/ui/partials/dashboard``)      every queue: counts, oldest-ready age, chart
``GET /queues/{name}``                      settings, counts, chart, the jobs of a state
``GET /ui/partials/queue/{name}[/types]``   its live counts and chart; its job-type figures
``POST /queues/{name}/pause|resume|purge``  the queue's forms
==========================================  ================================================
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sepp.domain.listing import JobQuery
from sepp.server.admin import QueueStatsView, state_name
from sepp.server.http.ui.bulk import actions_for
from sepp.server.http.ui.chart import WINDOWS, Chart, Window, build_chart, merge_rows, window_param
from sepp.server.http.ui.kit import PageKit
from sepp.server.http.ui.views import SLUG_OF, first_state_with_jobs, settings_rows, state_param


class QueuePages:
    """The dashboard and the queue pages over ``kit``: counts, chart, the jobs of a state,
    the job-type figures, and the pause / resume / purge forms."""

    def __init__(self, kit: PageKit) -> None:
        self.kit = kit
        self.admin = kit.admin

    # ------------------------------------------------------------------ dashboard

    async def _dashboard_context(self, request: Request) -> dict[str, Any]:
        window = window_param(request.query_params.get("window"))
        views = await self.admin.stats(minutes=window.minutes)
        totals = {f: sum(getattr(v.counts, f) for v in views) for f in
                  ("deferred", "scheduled", "ready", "reserved", "completed", "dead_lettered", "cancelled")}
        chart = build_chart(merge_rows(views), window) if views else None
        return {"views": views, "totals": totals, "chart": chart, "window": window, "WINDOWS": WINDOWS}

    async def dashboard(self, request: Request) -> Response:
        """The dashboard page (``?window=1h|6h|24h`` for the chart)."""
        return self.kit.render(request, "dashboard.html",
                           {"title": "Dashboard", **await self._dashboard_context(request)})

    async def dashboard_partial(self, request: Request) -> Response:
        """The dashboard body for htmx polling."""
        return self.kit.render(request, "_dashboard.html", await self._dashboard_context(request))

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
        return self.kit.render(request, "queue.html", {
            "title": f"Queue {name}", "q": q, "view": view, "chart": chart, "state": state, "slug": SLUG_OF[state],
            "jobs": listing.jobs, "next_token": listing.next_token, "paged": bool(token), "job_type": job_type or "",
            "settings": settings_rows(q.settings.model_dump()), "types": await self.admin.type_figures(name),
            "q_name": name, "bulk_actions": actions_for(state)})

    async def queue_types_partial(self, request: Request) -> Response:
        """The queue's job-type figures for htmx polling."""
        name = request.path_params["name"]
        return self.kit.render(request, "_job_types.html", {"types": await self.admin.type_figures(name),
                                                         "q_name": name})

    async def queue_partial(self, request: Request) -> Response:
        """Live counts and chart of one queue."""
        name = request.path_params["name"]
        self.admin.queue(name)
        view, chart = await self._queue_stats(name, window_param(request.query_params.get("window")))
        return self.kit.render(request, "_queue_stats.html", {"view": view, "chart": chart,
                                                          "state": state_param(request.query_params.get("state")),
                                                          "q_name": name})

    async def queue_pause(self, request: Request) -> Response:
        """Pause the queue."""
        name = request.path_params["name"]
        await self.admin.set_paused(name, True)
        self.kit.flash(request, f"Queue {name} paused: workers get nothing from it until it is resumed.")
        return RedirectResponse(f"/queues/{quote(name, safe='')}", status_code=303)

    async def queue_resume(self, request: Request) -> Response:
        """Resume the queue."""
        name = request.path_params["name"]
        await self.admin.set_paused(name, False)
        self.kit.flash(request, f"Queue {name} resumed.")
        return RedirectResponse(f"/queues/{quote(name, safe='')}", status_code=303)

    async def queue_purge(self, request: Request) -> Response:
        """Delete the queue's jobs in the ticked states."""
        name = request.path_params["name"]
        form = await self.kit.form(request)
        states = [state_param(s) for s in form.getlist("states") if isinstance(s, str) and s.strip()]
        if not states:
            self.kit.flash(request, "Nothing purged: tick at least one state.", "warn")
        else:
            n = await self.admin.purge(name, states)
            labels = ", ".join(state_name(s) for s in states)
            self.kit.flash(request, f"Purged {n:,} job(s) ({labels}) from {name}.")
        return RedirectResponse(f"/queues/{quote(name, safe='')}", status_code=303)
