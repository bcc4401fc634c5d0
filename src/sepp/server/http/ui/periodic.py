"""The UI's Periodic page: every schedule with its timing, next three run times,
last run and the job it produced, and the forms that pause, resume, trigger and delete one.
Listed in ``AdminUI``'s route table (``routes.py``); the same view as ``sepp periodic list``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from sepp.rejections import Reason
from sepp.server.errors import EngineError, NotFound, PeriodicInvalid
from sepp.server.http.ui.kit import PageKit
from sepp.server.periodic.admin import PeriodicAdmin

__all__ = ["PAGE_SIZE", "PeriodicPages"]

#: Schedules a page shows, as the queue page and the dead letters show 50 jobs.
PAGE_SIZE = 50


class PeriodicPages:
    """The Periodic page's routes over ``kit`` (its rendering, flashes, login and CSRF checks)."""

    def __init__(self, kit: PageKit) -> None:
        self.kit = kit

    def routes(self) -> list[BaseRoute]:
        """``/periodic``, its htmx partial and the four forms (POST, CSRF-checked)."""
        page, post = self.kit.page, self.kit.post
        return [
            Route("/periodic", page(self.page)),
            Route("/ui/partials/periodic", page(self.partial)),
            *(Route(f"/periodic/{{name}}/{action}", post(getattr(self, action)), methods=["POST"])
              for action in ("pause", "resume", "trigger", "delete")),
        ]

    def _admin(self) -> PeriodicAdmin:
        periodic = self.kit.admin.periodic
        if periodic is None:
            raise NotFound("periodic schedules are not available on this server", Reason.PERIODIC_NOT_FOUND)
        return periodic

    async def _context(self, request: Request) -> dict[str, Any]:
        """One page of schedules: ``?page=<token>`` as on the queue and dead-letter pages
        (here the name the page starts after; "" or absent = the first page)."""
        token = request.query_params.get("page", "")
        schedules, next_token = await self._admin().page(token, PAGE_SIZE)
        return {"schedules": schedules, "now": self.kit.parts.clock.now(), "token": token,
                "next_token": next_token}

    async def page(self, request: Request) -> Response:
        """The schedules (name, timing, queue and job type, next three runs, last run and its
        job or error, state) with their actions, ``PAGE_SIZE`` a page by name."""
        return self.kit.render(request, "periodic.html", {"title": "Periodic", **(await self._context(request))})

    async def partial(self, request: Request) -> Response:
        """The schedules table (of the same ``?page=``) for htmx polling."""
        return self.kit.render(request, "_periodic.html", await self._context(request))

    async def _back(self, request: Request) -> Response:
        """Back to the page the form was on (its hidden ``page`` field)."""
        page = (await self.kit.form(request)).get("page")
        url = "/periodic?" + urlencode({"page": page}) if isinstance(page, str) and page else "/periodic"
        return RedirectResponse(url, status_code=303)

    async def pause(self, request: Request) -> Response:
        """Pause the schedule."""
        name = request.path_params["name"]
        await self._admin().set_paused(name, True)
        self.kit.flash(request, f"Schedule {name} paused: it enqueues nothing until resumed.")
        return await self._back(request)

    async def resume(self, request: Request) -> Response:
        """Resume the schedule (the ticks of the pause are not caught up)."""
        name = request.path_params["name"]
        await self._admin().set_paused(name, False)
        self.kit.flash(request, f"Schedule {name} resumed.")
        return await self._back(request)

    async def trigger(self, request: Request) -> Response:
        """Enqueue the schedule's job now; the flash links to it."""
        name = request.path_params["name"]
        try:
            job_id, _dedup = await self._admin().trigger(name)
        except NotFound:
            raise
        except (PeriodicInvalid, EngineError) as exc:
            self.kit.flash(request, f"Schedule {name} not triggered: {exc}", "warn")
            return await self._back(request)
        self.kit.flash(request, f"Schedule {name} triggered: job {job_id}.")
        return RedirectResponse(f"/jobs/{quote(job_id, safe='')}", status_code=303)

    async def delete(self, request: Request) -> Response:
        """Forget the schedule (its jobs stay)."""
        name = request.path_params["name"]
        await self._admin().delete(name)
        self.kit.flash(request, f"Schedule {name} deleted.")
        return await self._back(request)

