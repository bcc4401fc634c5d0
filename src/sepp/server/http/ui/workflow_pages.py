"""The UI's workflow pages (docs/workflows.md "Seeing and steering a workflow"): ``/workflows``
(newest first, a keyset page of 50) and ``/workflows/{id}`` (jobs per state, the graph drawn on
the server — ``workflow_graph`` —, the failed nodes and why, and a Cancel workflow button
behind the UI's confirm and CSRF token)."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from sepp.domain.ids import job_id_text
from sepp.server.http.ui.kit import PageKit
from sepp.server.http.ui.views import STATE_FIELD, fmt_time
from sepp.server.http.ui.workflow_graph import BOX_H, BOX_W, MAX_DRAWN, by_type, layout

#: Workflows a page of ``/workflows`` lists.
PAGE = 50


class WorkflowPages:
    """The workflow list, one workflow's page and its cancel over ``kit``."""

    def __init__(self, kit: PageKit) -> None:
        self.kit = kit
        self.workflows = kit.admin.workflows

    def routes(self) -> list[BaseRoute]:
        """The pages' routes (behind the login; the cancel behind the CSRF token too)."""
        page, post = self.kit.page, self.kit.post
        return [Route("/workflows", page(self.list_page)),
                Route("/workflows/{workflow_id}", page(self.workflow_page)),
                Route("/workflows/{workflow_id}/cancel", post(self.workflow_cancel), methods=["POST"])]

    async def list_page(self, request: Request) -> Response:
        """Workflows newest first (``?after=`` the page token of ``Next page``)."""
        rows, token = await self.workflows.list_workflows(request.query_params.get("after", ""), PAGE)
        items = [{"id": job_id_text(s.workflow_id), "created": fmt_time(s.created_at), "nodes": s.nodes,
                  "terminal": s.terminal, "counts": [(STATE_FIELD[n], getattr(s.counts, STATE_FIELD[n]))
                                                     for n in STATE_FIELD if getattr(s.counts, STATE_FIELD[n])]}
                 for s in rows]
        return self.kit.render(request, "workflows.html", {"title": "Workflows", "workflows": items, "next": token})

    async def workflow_page(self, request: Request) -> Response:
        """One workflow: counts, the graph (or its job types past ``MAX_DRAWN`` nodes), the
        failed nodes, and the cancel form while it is not terminal."""
        view = await self.workflows.get_workflow(request.path_params["workflow_id"])
        s = view.summary
        drawn = len(view.nodes) <= MAX_DRAWN
        failed = [(i, job_id_text(view.nodes[i].id), view.nodes[i]) for i in view.failed()][:200]
        wf_id = job_id_text(s.workflow_id)
        context = {"title": f"Workflow {wf_id}", "wf_id": wf_id, "summary": s, "created": fmt_time(s.created_at),
                   "counts": [(STATE_FIELD[n], getattr(s.counts, STATE_FIELD[n])) for n in STATE_FIELD
                              if getattr(s.counts, STATE_FIELD[n])],
                   "graph": layout(view) if drawn else None, "box_w": BOX_W, "box_h": BOX_H,
                   "types": None if drawn else by_type(view), "max_drawn": MAX_DRAWN,
                   "failed": failed, "failed_total": len(view.failed()), "fields": list(STATE_FIELD.values())}
        return self.kit.render(request, "workflow.html", context)

    async def workflow_cancel(self, request: Request) -> Response:
        """Cancel every unfinished node (``WorkflowAdmin.cancel_workflow``), then back to the page."""
        wf = request.path_params["workflow_id"]
        form = await self.kit.form(request)
        reason = form.get("reason", "")
        done, _view = await self.workflows.cancel_workflow(wf, reason if isinstance(reason, str) else "")
        self.kit.flash(request, f"Workflow cancelled: {len(done.cancelled)} node(s) cancelled, "
                                f"{len(done.requested)} running node(s) asked to stop.")
        return RedirectResponse(f"/workflows/{quote(wf, safe='')}", status_code=303)


__all__ = ["PAGE", "WorkflowPages"]
