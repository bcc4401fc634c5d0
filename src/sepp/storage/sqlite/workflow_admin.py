"""The admin side of workflows on SQLite (``sepp.storage.workflow_admin``): the listing and the
nodes of a workflow (reads on the reader threads) and the cancel of a whole workflow (one
operation of the writer, so one commit)."""

from __future__ import annotations

import sqlite3
from functools import partial

from sepp.domain.policy import PolicyLookup
from sepp.domain.transitions import CancelAction
from sepp.domain.workflows import WorkflowCancel, WorkflowNode, WorkflowSummary
from sepp.storage import workflow_admin as shared
from sepp.storage.sqlite.dependents import propagate_failures
from sepp.storage.sqlite.reads import SQLiteReads
from sepp.storage.sqlite.sql import A


def cancel_workflow_op(workflow_id: bytes, now: int, policy: PolicyLookup, reason: str,
                       conn: sqlite3.Connection) -> WorkflowCancel:
    """Writer side of ``SQLiteStore.cancel_workflow``: the plan of ``workflow_admin.cancel_plan``
    written node by node (the one writer: the states judged are the states written over),
    then the failure policies of jobs outside the workflow that depend on a cancelled node
    (``propagate_failures``), all in the writer's one transaction."""
    rows = conn.execute(shared.CANCEL_ROWS, (workflow_id,)).fetchall()
    cancelled: list[bytes] = []
    requested: list[bytes] = []
    queues: set[str] = set()
    for seq, job_id, queue, decision in shared.cancel_plan(rows, now, policy, reason):
        if decision.action is CancelAction.CANCEL:
            conn.execute(A["cancel_now"], (decision.finished_at, decision.purge_at, decision.reason, seq))
            cancelled.append(job_id)
            queues.add(queue)
        else:
            conn.execute(A["request_cancel"], (seq,))
            requested.append(job_id)
    propagate_failures(conn)
    return WorkflowCancel(bool(rows), cancelled, requested, sorted(queues))


class WorkflowAdminSQLite:
    """``SQLiteStore.list_workflows``, ``workflow_nodes`` and ``cancel_workflow``."""

    _reads: SQLiteReads

    async def list_workflows(self, before: bytes | None, limit: int) -> list[WorkflowSummary]:
        """See ``Store.list_workflows``."""
        return shared.summaries(await self._reads.read(shared.LIST, (before or shared.TOP, limit)))

    async def workflow_nodes(self, workflow_id: bytes) -> list[WorkflowNode]:
        """See ``Store.workflow_nodes``."""
        return shared.nodes(await self._reads.read(shared.NODES, (workflow_id,)))

    async def cancel_workflow(self, workflow_id: bytes, now: int, policy: PolicyLookup,
                              reason: str) -> WorkflowCancel:
        """See ``Store.cancel_workflow``."""
        result: WorkflowCancel = await self._reads.submit(
            partial(cancel_workflow_op, workflow_id, now, policy, reason))
        return result


__all__ = ["WorkflowAdminSQLite", "cancel_workflow_op"]
