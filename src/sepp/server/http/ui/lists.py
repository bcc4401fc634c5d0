"""The UI's cross-queue job pages: Jobs, Busy and Retries, and the ticked-rows form they and
the dead-letter page share. Listed in ``AdminUI``'s route table (``routes.py``).

==========================================  ================================================
``GET /jobs``                               every queue's jobs of one state (tabs with the
                                            totals; ``?queue=&job_type=&state=&page=``),
                                            opening on the first state that has jobs
``GET /busy`` (``/ui/partials/busy``)       what each worker runs now: the RESERVED jobs by
                                            worker, with how long each has run and when its
                                            lease ends (``?worker=`` for one worker)
``GET /retries``                            SCHEDULED jobs waiting for a retry (attempt > 0),
                                            apart from the ones scheduled for a first run,
                                            in the order they will run (``?queue=``)
``POST /jobs/bulk``                         the ticked rows of any of these lists (and of
                                            ``/dead``): requeue / cancel / delete through
                                            ``BulkActions.apply``, then back to the list
==========================================  ================================================

Every listing is a keyset page of ``AdminEngine.list_jobs`` through an index: READY and the
finished states walk their per-queue indexes queue by queue, RESERVED ``jobs_leased``, the
retries ``jobs_retrying`` (SQLite and PostgreSQL migration 0011).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from sepp.domain.listing import JobQuery, JobSummary
from sepp.domain.states import State
from sepp.server.admin import WorkerView
from sepp.server.admin.jobs import MAX_PAGE
from sepp.server.http.ui.bulk import actions_for, apply_selected
from sepp.server.http.ui.kit import PageKit
from sepp.server.http.ui.security import safe_next
from sepp.server.http.ui.views import SLUG_OF, STATE_FIELD, TAB_ORDER, first_state_with_jobs, state_param

__all__ = ["BUSY_SHOWN", "PAGE_SIZE", "BusyGroup", "ListPages"]

#: Jobs a page of the Jobs and Retries lists shows (as the queue and dead-letter pages).
PAGE_SIZE = 50
#: Most RESERVED jobs the Busy page reads (one listing page; the rest are counted).
BUSY_SHOWN = MAX_PAGE
_RESERVED, _SCHEDULED = int(State.RESERVED), int(State.SCHEDULED)


@dataclass(frozen=True, slots=True)
class BusyGroup:
    """One worker on the Busy page: its id (``""`` for jobs reserved without one), what the
    Workers page knows of it (None when it has not reported within the hour) and the jobs
    it holds now, the longest-running first."""

    worker_id: str
    worker: WorkerView | None
    jobs: list[JobSummary]


def busy_groups(jobs: list[JobSummary], workers: Mapping[str, WorkerView]) -> list[BusyGroup]:
    """``jobs`` (RESERVED) grouped by worker id, the workers by id, each group's jobs by
    start time (then id), a job without a start time last."""
    by_worker: dict[str, list[JobSummary]] = {}
    for s in jobs:
        by_worker.setdefault(s.record.worker_id or "", []).append(s)
    groups = []
    for worker_id in sorted(by_worker):
        held = sorted(by_worker[worker_id], key=lambda s: (s.record.started_at is None, s.record.started_at or 0,
                                                           s.record.seq))
        groups.append(BusyGroup(worker_id, workers.get(worker_id), held))
    return groups


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class ListPages:
    """The Jobs, Busy and Retries pages and the ticked-rows form over ``kit`` (its rendering,
    flashes, login and CSRF checks)."""

    def __init__(self, kit: PageKit) -> None:
        self.kit = kit

    def routes(self) -> list[BaseRoute]:
        """The routes (``/jobs/bulk`` before the job page's ``/jobs/{job_id}``)."""
        page, post = self.kit.page, self.kit.post
        return [
            Route("/jobs", page(self.jobs_page)),
            Route("/jobs/bulk", post(self.selected), methods=["POST"]),
            Route("/busy", page(self.busy_page)),
            Route("/ui/partials/busy", page(self.busy_partial)),
            Route("/retries", page(self.retries_page)),
        ]

    # ------------------------------------------------------------------ ticked rows

    async def selected(self, request: Request) -> Response:
        """Apply the action to the ticked jobs of a list (``state`` is the state the list
        shows), then back to it (``back``, a path of this site) with a flash."""
        form = await self.kit.form(request)
        action, state = _text(form.get("action")), state_param(_text(form.get("state")) or None)
        back = safe_next(_text(form.get("back")))
        ids = [v for v in form.getlist("job_id") if isinstance(v, str) and v]
        if not ids:
            self.kit.flash(request, "Nothing done: tick at least one job.", "warn")
        else:
            await apply_selected(self.kit, request, action, state, ids)
        return RedirectResponse(back, status_code=303)

    # ------------------------------------------------------------------ /jobs

    async def jobs_page(self, request: Request) -> Response:
        """Every queue's jobs (or one queue's, ``?queue=``) of one state, with the state tabs
        and their totals; without ``?state=`` the first state that has jobs. A job-type filter
        across queues is a search: a page examines at most ``search_scan_rows`` jobs and
        says when it stopped there."""
        params = request.query_params
        queue = params.get("queue", "").strip()
        job_type = params.get("job_type", "").strip()
        totals = await self.kit.admin.state_totals(queue or None)
        state = state_param(params.get("state"), first_state_with_jobs(totals))
        token = params.get("page", "")
        query = JobQuery(queue=queue or None, state=state, job_type=job_type or None)
        listing = await self.kit.admin.list_jobs(query, token, PAGE_SIZE)
        keep = {k: v for k, v in (("queue", queue), ("job_type", job_type)) if v}
        here = "/jobs?" + urlencode({**keep, "state": SLUG_OF[state], **({"page": token} if token else {})})
        return self.kit.render(request, "jobs.html", {
            "title": "Jobs", "totals": totals, "tabs": TAB_ORDER, "state": state, "slug": SLUG_OF[state],
            "queue": queue, "job_type": job_type, "jobs": listing.jobs, "limited": listing.scan_limited,
            "tab_url": "/jobs?" + urlencode(keep) + ("&" if keep else "") + "state=",
            "next_url": "/jobs?" + urlencode({**keep, "state": SLUG_OF[state], "page": listing.next_token})
            if listing.next_token else "",
            "first_url": "/jobs?" + urlencode({**keep, "state": SLUG_OF[state]}) if token else "",
            "here": here, "bulk_actions": actions_for(state), "count": getattr(totals, STATE_FIELD[state]),
            "queue_names": [q.name for q in self.kit.admin.queues()]})

    # ------------------------------------------------------------------ /busy

    async def _busy_context(self, request: Request) -> dict[str, Any]:
        admin = self.kit.admin
        only = request.query_params.get("worker", "")
        listing = await admin.list_jobs(JobQuery(state=_RESERVED), "", BUSY_SHOWN)
        jobs = [s for s in listing.jobs if not only or (s.record.worker_id or "") == only]
        workers = {w.worker_id: w for w in await admin.workers()}
        total = (await admin.state_totals()).reserved
        return {"groups": busy_groups(jobs, workers), "shown": len(listing.jobs), "running": len(jobs),
                "more": bool(listing.next_token), "total": max(total, len(listing.jobs)), "worker": only,
                "now": self.kit.parts.clock.now(), "busy_shown": BUSY_SHOWN}

    async def busy_page(self, request: Request) -> Response:
        """What each worker runs now (Sidekiq's "Busy"): every RESERVED job, by worker."""
        return self.kit.render(request, "busy.html", {"title": "Busy", **await self._busy_context(request)})

    async def busy_partial(self, request: Request) -> Response:
        """The Busy table for htmx polling."""
        return self.kit.render(request, "_busy.html", await self._busy_context(request))

    # ------------------------------------------------------------------ /retries

    async def retries_page(self, request: Request) -> Response:
        """SCHEDULED jobs waiting for a retry (attempt > 0), next to run first; ``?queue=``
        and ``?job_type=`` narrow it. Jobs scheduled for their first run are not listed."""
        params = request.query_params
        queue = params.get("queue", "").strip()
        job_type = params.get("job_type", "").strip()
        token = params.get("page", "")
        query = JobQuery(queue=queue or None, state=_SCHEDULED, job_type=job_type or None, retries=True)
        listing = await self.kit.admin.list_jobs(query, token, PAGE_SIZE)
        keep = {k: v for k, v in (("queue", queue), ("job_type", job_type)) if v}
        here = "/retries?" + urlencode({**keep, **({"page": token} if token else {})})
        return self.kit.render(request, "retries.html", {
            "title": "Retries", "queue": queue, "job_type": job_type, "jobs": listing.jobs,
            "limited": listing.scan_limited, "here": here, "bulk_actions": actions_for(_SCHEDULED),
            "next_url": "/retries?" + urlencode({**keep, "page": listing.next_token}) if listing.next_token else "",
            "first_url": "/retries?" + urlencode(keep) if token else "",
            "queue_names": [q.name for q in self.kit.admin.queues()]})
