"""The UI's job pages: one job and its cancel / requeue / delete forms, the dead letters
(filters, dry-run count, requeue of every match), and finding (``/find``: id or queue and
idempotency key) and searching (``/search``, syntax ``sepp.server.admin.search``) jobs."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from sepp.domain.ids import job_id_text
from sepp.domain.listing import JobQuery
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.server.admin import StateConflict
from sepp.server.admin.search import parse_search
from sepp.server.errors import InvalidRequest, NotFound
from sepp.server.http.ui.forms import dead_filter
from sepp.server.http.ui.kit import PageKit
from sepp.server.http.ui.views import STATE_FIELD, fmt_time, job_context

#: How often the page of a job that is not finished fetches its live part again, seconds.
JOB_POLL_SECONDS = 2
#: The status that tells htmx to stop polling (a 2xx: the answer is still swapped in).
STOP_POLLING = 286


class JobPages:
    """The job page and its actions, the dead letters, and finding and searching jobs over
    ``kit``."""

    def __init__(self, kit: PageKit) -> None:
        self.kit = kit
        self.admin = kit.admin

    # ------------------------------------------------------------------ job

    async def job_page(self, request: Request) -> Response:
        """Every field of one job; the live part (``_job_live.html``) refreshes itself every
        ``JOB_POLL_SECONDS`` while the job is not finished."""
        rec = await self.admin.get_job(request.path_params["job_id"])
        return self.kit.render(request, "job.html", {**await self._live_context(rec), "poll": JOB_POLL_SECONDS})

    async def _live_context(self, rec: JobRecord) -> dict[str, Any]:
        """``job_context`` plus ``waiting_on``: the ids of the dependencies a DEFERRED job still
        waits for ([] otherwise), also part of the live part's fingerprint (``version``)."""
        context = job_context(rec)
        waiting = await self.admin.waiting_on(rec)
        context["waiting_on"] = waiting
        if waiting:
            context["version"] = f"{context['version']}-w{len(waiting)}"
        return context

    async def job_partial(self, request: Request) -> Response:
        """``GET /ui/partials/jobs/{job_id}``: the job page's live part (state, fields,
        progress, result, attempts), one ``get_job``. A finished job's (COMPLETED,
        DEAD_LETTERED, CANCELLED) comes without the polling trigger and with status 286,
        which tells htmx to stop polling; so does a job that is gone (deleted or purged),
        with a line saying so instead of the 404 page. ``?v=`` is the fingerprint
        (``views.live_version``) of the part the page shows: while it still holds the answer
        is an empty 204, which htmx does not swap in."""
        try:
            rec = await self.admin.get_job(request.path_params["job_id"])
        except NotFound:
            return HTMLResponse('<div id="job-live" data-state="gone"><p class="flash flash-error" role="alert">'
                                "This job is gone: deleted, or purged after its retention. Reload the page."
                                "</p></div>", status_code=STOP_POLLING)
        context = await self._live_context(rec)
        if request.query_params.get("v") == context["version"] and not context["terminal"]:
            return Response(status_code=204)  # unchanged: htmx swaps nothing and polls on
        return self.kit.render(request, "_job_live.html", {**context, "poll": JOB_POLL_SECONDS},
                               STOP_POLLING if context["terminal"] else 200)

    async def _job_action(self, request: Request, verb: str) -> Response:
        job_id = request.path_params["job_id"]
        url = f"/jobs/{quote(job_id, safe='')}"
        try:
            if verb == "cancel":
                form = await self.kit.form(request)
                reason = form.get("reason", "")
                rec = await self.admin.cancel(job_id, reason if isinstance(reason, str) else "")
                if rec.state == int(State.RESERVED):
                    self.kit.flash(request, "Cancel requested: the worker holding the job learns it on its next "
                                        "lease extension.")
                else:
                    self.kit.flash(request, "Job cancelled.")
            elif verb == "requeue":
                await self.admin.requeue(job_id)
                self.kit.flash(request, "Job requeued: READY again with attempt 0 (history kept).")
            else:
                rec = await self.admin.get_job(job_id)
                await self.admin.delete_job(job_id)
                self.kit.flash(request, f"Job {job_id} deleted.")
                return RedirectResponse(f"/queues/{quote(rec.queue, safe='')}", status_code=303)
        except StateConflict as exc:
            self.kit.flash(request, str(exc), "error")
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
        return self.kit.render(request, "dead.html", {
            "title": "Dead letters", "f": raw, "matched": matched, "jobs": listing.jobs, "next_url": next_url,
            "here": here,
            "first_url": "/dead?" + urlencode(keep) if token else "", "queue_names": [q.name for q in
                                                                                    self.admin.queues()]})

    async def dead_requeue(self, request: Request) -> Response:
        """Requeue every dead letter matching the posted filter."""
        form = await self.kit.form(request)
        where, raw = dead_filter({k: v for k, v in form.items() if isinstance(v, str)})
        matched, done = await self.admin.requeue_dead(where)
        self.kit.flash(request, f"Requeued {done:,} of {matched:,} matching dead-lettered job(s).")
        keep = {k: v for k, v in raw.items() if v}
        return RedirectResponse("/dead?" + urlencode(keep), status_code=303)

    # ------------------------------------------------------------------ search

    async def find(self, request: Request) -> Response:
        """``?q=<job id>`` or ``?queue=&key=`` → the job's page."""
        text = request.query_params.get("q", "").strip()
        queue = request.query_params.get("queue", "").strip()
        key = request.query_params.get("key", "")
        if queue and key:
            job_id, expires, job = await self.admin.find_by_key(queue, key)
            if job is None:
                return self.kit.render(request, "error.html", {"title": "Job gone", "message":
                                   f"The key still points at job {job_id} (until {fmt_time(expires)}), but that "
                                   "job was deleted or purged."}, 404)
            return RedirectResponse(f"/jobs/{job_id}", status_code=303)
        if text:
            rec = await self.admin.get_job(text)
            return RedirectResponse(f"/jobs/{job_id_text(rec.id)}", status_code=303)
        return self.kit.render(request, "error.html", {"title": "Find a job", "message":
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
        scan_rows = self.kit.parts.config.search_scan_rows
        context: dict[str, Any] = {"title": "Search", "q": text, "scan_rows": scan_rows, "error": "",
                                   "searched": False, "jobs": [], "state": None, "limited": False,
                                   "next_url": "", "first_url": "", "examined": 0, "total": None}
        if not text:
            return self.kit.render(request, "search.html", context)
        try:
            spec = parse_search(text)
            query = spec.query(self.kit.parts.limits.max_idempotency_key_bytes)
            if spec.only_id and not token:
                rec = await self.admin.get_job(spec.job_id)
                return RedirectResponse(f"/jobs/{job_id_text(rec.id)}", status_code=303)
            listing = await self.admin.list_jobs(query, token, 50)
        except InvalidRequest as exc:
            return self.kit.render(request, "search.html", {**context, "error": str(exc)}, 400)
        except NotFound:
            listing = None
        seen = request.query_params.get("seen", "")
        examined = (int(seen) if seen.isascii() and seen.isdigit() and len(seen) < 16 else 0) if token else 0
        examined += listing.examined if listing is not None else 0
        next_url = "/search?" + urlencode({"q": text, "page": listing.next_token, "seen": examined}) \
            if listing is not None and listing.next_token else ""
        total = await self._search_total(query) if listing is not None and listing.next_token else None
        return self.kit.render(request, "search.html", {
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
