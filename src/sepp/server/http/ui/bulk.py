"""The UI's bulk actions over ``sepp.server.admin.bulk.BulkActions``.

==============================================  =========================================
``POST /queues/{name}/bulk``                    the ticked jobs (``job_id`` fields, at most
                                                1,000): cancel / requeue / delete, in the
                                                request; flash with what was done/skipped
``GET /queues/{name}/bulk?action=&state=``      dry run: how many jobs of the filter
                                                (``state``, ``job_type``) match, and a
                                                confirm form
``POST /queues/{name}/bulk/run``                start the run over every matching job (at
                                                most the confirmed count) → its page
``GET /bulk/{run}``                             the run's progress page
``GET /ui/partials/bulk/{run}``                 its progress fragment (htmx polls it every
                                                second until the run ends)
==============================================  =========================================

Every POST goes through ``PageKit.post`` (the session's CSRF token, then login), every
GET through ``PageKit.page``; handlers only parse the form and call ``BulkActions``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from sepp.domain.listing import JobQuery
from sepp.server.admin.bulk import ACTION_STATES, MAX_SELECTED, BulkRun
from sepp.server.errors import InvalidRequest
from sepp.server.http.ui.kit import PageKit
from sepp.server.http.ui.views import SLUG_OF, state_param

#: The progress fragment's poll period, seconds.
PROGRESS_POLL_SECONDS = 1
#: Past tense of each action (flashes, headings).
DONE = {"cancel": "cancelled", "requeue": "requeued", "delete": "deleted"}
#: The most a confirmed count may say (a form value is caller input).
MAX_CONFIRMED = 10**12


def actions_for(state: int) -> list[str]:
    """The bulk actions offered on a state's tab (``ACTION_STATES``), in button order."""
    return [a for a in ("requeue", "cancel", "delete") if state in ACTION_STATES[a]]


async def apply_selected(kit: PageKit, request: Request, action: str, state: int, ids: list[str]) -> None:
    """Apply ``action`` to the ticked jobs ``ids`` (listed in ``state``) with
    ``BulkActions.apply`` and flash what was done, requested and skipped. Raises
    ``InvalidRequest`` past ``MAX_SELECTED`` ids or for an action the state does not take."""
    if len(ids) > MAX_SELECTED:
        raise InvalidRequest(f"select at most {MAX_SELECTED:,} jobs (got {len(ids):,})", "job_id")
    outcome = await kit.admin.bulk.apply(action, state, ids)
    skipped = outcome.skipped_text()
    requested = outcome.requested_text()
    kit.flash(request, f"{DONE.get(action, action).capitalize()} {outcome.done:,} of {len(ids):,} selected "
             f"job(s)" + (f"; {requested}" if requested else "") + (f"; {skipped}" if skipped else "") + ".",
             "warn" if skipped else "ok")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class BulkUI:
    """The bulk-action routes over a ``PageKit`` (see the module docstring)."""

    def __init__(self, kit: PageKit) -> None:
        self.kit = kit
        self.bulk = kit.admin.bulk

    def routes(self) -> list[BaseRoute]:
        """The routes to mount beside the UI's own."""
        page, post = self.kit.page, self.kit.post
        return [
            Route("/queues/{name}/bulk", page(self.confirm_page)),
            Route("/queues/{name}/bulk", post(self.selected), methods=["POST"]),
            Route("/queues/{name}/bulk/run", post(self.start), methods=["POST"]),
            Route("/bulk/{run_id}", page(self.run_page)),
            Route("/ui/partials/bulk/{run_id}", page(self.run_partial)),
        ]

    @staticmethod
    def _back(name: str, state: int, job_type: str) -> str:
        query = {"state": SLUG_OF.get(state, "")} | ({"job_type": job_type} if job_type else {})
        return f"/queues/{quote(name, safe='')}?{urlencode(query)}"

    async def selected(self, request: Request) -> Response:
        """Apply the action to the ticked jobs, then back to the listing with a flash."""
        name = request.path_params["name"]
        self.kit.admin.queue(name)
        form = await self.kit.form(request)
        action, state = _text(form.get("action")), state_param(_text(form.get("state")) or None)
        job_type = _text(form.get("job_type"))
        ids = [v for v in form.getlist("job_id") if isinstance(v, str) and v]
        back = self._back(name, state, job_type)
        if not ids:
            self.kit.flash(request, "Nothing done: tick at least one job (or use \"every matching job\").", "warn")
            return RedirectResponse(back, status_code=303)
        await apply_selected(self.kit, request, action, state, ids)
        return RedirectResponse(back, status_code=303)

    def _query(self, name: str, params: Any) -> tuple[str, JobQuery]:
        """(action, the listing's filter) of a query string or form; ``before`` (µs) is the
        dry run's finished-state snapshot, carried by the confirm form."""
        action = _text(params.get("action"))
        state = state_param(_text(params.get("state")) or None)
        job_type = _text(params.get("job_type")) or None
        before = _text(params.get("before")).strip()
        if before and (not (before.isascii() and before.isdigit()) or int(before) >= 2**63):
            raise InvalidRequest("the snapshot time is not a whole number of µs", "before")
        return action, JobQuery(queue=name, state=state, job_type=job_type,
                                finished_before=int(before) if before else None)

    async def confirm_page(self, request: Request) -> Response:
        """The dry run: the count of matching jobs and a confirm button (nothing changes)."""
        name = request.path_params["name"]
        q = self.kit.admin.queue(name)
        action, query = self._query(name, request.query_params)
        snapshot, matched = await self.bulk.count(action, query)
        state = query.state or 0
        return self.kit.render(request, "bulk_confirm.html", {"before": snapshot.finished_before or "",
            "title": f"{action.capitalize()} jobs of {name}", "q": q, "action": action, "done_word": DONE[action],
            "state": state, "slug": SLUG_OF[state], "job_type": query.job_type or "", "matched": matched,
            "back": self._back(name, state, query.job_type or "")})

    async def start(self, request: Request) -> Response:
        """Start the run over every matching job (at most the confirmed count) → its page."""
        name = request.path_params["name"]
        form = await self.kit.form(request)
        action, query = self._query(name, form)
        raw = _text(form.get("expected")).strip()
        if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_CONFIRMED:
            raise InvalidRequest("the confirmed count is missing or not a whole number", "expected")
        run = await self.bulk.start(action, query, int(raw))
        return RedirectResponse(f"/bulk/{run.id}", status_code=303)

    def _gone(self, request: Request) -> Response:
        return self.kit.render(request, "error.html", {"title": "Not found", "message":
                              "No such bulk action on this node (the last 20 are kept, on the node that ran "
                              "them)."}, 404)

    def _context(self, run: BulkRun) -> dict[str, Any]:
        now = self.kit.parts.clock.now()
        state = run.query.state or 0
        return {"run": run, "done_word": DONE.get(run.action, run.action), "rate": run.rate(now),
                "skipped": run.outcome.skipped_text(), "requested": run.outcome.requested_text(),
                "poll": PROGRESS_POLL_SECONDS,
                "back": self._back(run.query.queue or "", state, run.query.job_type or ""),
                "state": state, "queue": run.query.queue or ""}

    async def run_page(self, request: Request) -> Response:
        """A run's page: what it does and its live progress."""
        run = self.bulk.run(request.path_params["run_id"])
        if run is None:
            return self._gone(request)
        return self.kit.render(request, "bulk_run.html", {"title": f"Bulk {run.action}", **self._context(run)})

    async def run_partial(self, request: Request) -> Response:
        """The progress fragment (polled until the run ends)."""
        run = self.bulk.run(request.path_params["run_id"])
        if run is None:
            return self._gone(request)
        return self.kit.render(request, "_bulk_progress.html", self._context(run))
