"""The admin's workflow operations (docs/workflows.md "Seeing and steering a workflow"): list
the workflows newest first, read one with its nodes, cancel one whole.

Transport-agnostic like the rest of ``sepp.server.admin``: the gRPC ``AdminService``, the CLI
(through it) and the web UI call it. Errors are ``sepp.server.errors`` exceptions
(``NotFound`` WORKFLOW_NOT_FOUND, ``InvalidRequest``); a store failure propagates as
``StoreError``. Times are µs UTC, read from the server's clock (``parts.clock``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.domain.workflows import WorkflowCancel, WorkflowNode, WorkflowSummary, counts_of
from sepp.quoting import clip, quote
from sepp.rejections import Reason
from sepp.server.errors import InvalidRequest, NotFound
from sepp.server.job_events import CANCELLED
from sepp.server.parts import ServerParts

#: Page sizes of ListWorkflows.
DEFAULT_PAGE, MAX_PAGE = 50, 1000


def parse_workflow_id(text: str, field: str = "workflow_id") -> bytes:
    """The 16-byte id of a workflow id's UUID text; ``InvalidRequest`` (``field``) otherwise."""
    raw = job_id_bytes(text)
    if raw is None:
        raise InvalidRequest(f"{field} {quote(clip(text, 64))} is not a UUID", field)
    return raw


def default_reason(workflow_id: str) -> str:
    """The reason a workflow cancel without one gives each node it cancels."""
    return f"WORKFLOW_CANCELLED: workflow {workflow_id} was cancelled by an admin"


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """One workflow as ``GetWorkflow`` and its page show it: its summary and its stored nodes
    in node order (``Store.workflow_nodes``)."""

    summary: WorkflowSummary
    nodes: list[WorkflowNode]

    def failed(self) -> list[int]:
        """Indexes (in ``nodes``) of the DEAD_LETTERED and CANCELLED nodes, in node order."""
        return [i for i, n in enumerate(self.nodes) if n.failed]

    def edges(self) -> tuple[list[list[int]], list[list[bytes]]]:
        """Per node: the indexes of the nodes of this workflow it runs after, and the ids of
        the jobs outside it that it depends on (each in the order it named them)."""
        index = {n.id: i for i, n in enumerate(self.nodes)}
        after = [[index[d] for d in n.depends_on if d in index] for n in self.nodes]
        outside = [[d for d in n.depends_on if d not in index] for n in self.nodes]
        return after, outside


def summary_of(workflow_id: bytes, nodes: Sequence[WorkflowNode]) -> WorkflowSummary:
    """The ``WorkflowSummary`` of a workflow whose stored nodes are ``nodes`` (not empty)."""
    counts = counts_of((n.state, 1) for n in nodes)
    return WorkflowSummary(workflow_id, min(n.enqueued_at for n in nodes), counts)


class WorkflowAdmin:
    """The workflow operations over the node's ``ServerParts`` (store, events, clock).
    ``changed`` is called after a cancel that changed how many jobs a state holds (the
    admin's cached counts are read anew then)."""

    def __init__(self, parts: ServerParts, changed: Callable[[], None]) -> None:
        self.parts = parts
        self._changed = changed

    async def list_workflows(self, page_token: str = "", page_size: int = 0) -> tuple[list[WorkflowSummary], str]:
        """One page of workflows, newest first, and the token of the next page ("" on the
        last). The token is the last listed workflow's id. Raises ``InvalidRequest`` for a
        page size outside 0..``MAX_PAGE`` or a malformed token."""
        if page_size < 0 or page_size > MAX_PAGE:
            raise InvalidRequest(f"page_size must be between 1 and {MAX_PAGE} (0 = {DEFAULT_PAGE}; got {page_size})",
                                 "page_size", 0 if page_size < 0 else MAX_PAGE, page_size)
        before = parse_workflow_id(page_token, "page_token") if page_token else None
        limit = page_size or DEFAULT_PAGE
        page = await self.parts.store.list_workflows(before, limit + 1)
        more = len(page) > limit
        page = page[:limit]
        return page, job_id_text(page[-1].workflow_id) if more else ""

    async def get_workflow(self, workflow_id: str) -> WorkflowView:
        """The workflow and its stored nodes. Raises ``InvalidRequest`` (not a UUID) or
        ``NotFound`` (WORKFLOW_NOT_FOUND: no stored job carries the id)."""
        raw = parse_workflow_id(workflow_id)
        nodes = await self.parts.store.workflow_nodes(raw)
        if not nodes:
            raise self._not_found(workflow_id)
        return WorkflowView(summary_of(raw, nodes), nodes)

    async def cancel_workflow(self, workflow_id: str, reason: str = "") -> tuple[WorkflowCancel, WorkflowView]:
        """Cancel every unfinished node in one commit (``Store.cancel_workflow``; ``reason``
        "" = ``default_reason``, at most 1,024 characters kept) and read the workflow after.
        Waiters on the cancelled jobs are answered, and their CANCELLED events sent. Raises
        ``InvalidRequest`` or ``NotFound`` as ``get_workflow``."""
        raw = parse_workflow_id(workflow_id)
        # A NUL cannot be stored as text by PostgreSQL: the free-form reason keeps U+FFFD instead.
        text = reason[:1024].replace("\x00", "\ufffd") if reason else default_reason(job_id_text(raw))
        parts = self.parts
        done = await parts.store.cancel_workflow(raw, parts.clock.now(), parts.queues.policies(), text)
        if not done.found:
            raise self._not_found(workflow_id)
        if done.cancelled or done.requested:
            self._changed()
        if done.cancelled:
            parts.events.ended(list(done.cancelled), ())  # waits for them answer now
        view = await self.get_workflow(workflow_id)
        if done.cancelled and parts.job_events.active:
            cancelled = set(done.cancelled)
            for n in view.nodes:
                if n.id in cancelled:
                    parts.job_events.emit(CANCELLED, n.id, n.queue, n.job_type, n.state,
                                          n.finished_at or parts.clock.now(), n.attempt, reason=n.reason)
        return done, view

    @staticmethod
    def _not_found(workflow_id: str) -> NotFound:
        return NotFound(f"workflow {clip(workflow_id, 64)} does not exist (or all its jobs were purged)",
                        Reason.WORKFLOW_NOT_FOUND)


__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "WorkflowAdmin", "WorkflowView", "default_reason", "parse_workflow_id",
           "summary_of"]
