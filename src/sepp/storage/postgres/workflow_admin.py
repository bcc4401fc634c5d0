"""The admin side of workflows on PostgreSQL (``sepp.storage.workflow_admin``): the listing
and the nodes of a workflow (reads on the pool) and the cancel of a whole workflow (one
operation of the committer, so one commit).

The cancel locks the workflow's rows (``FOR UPDATE``, in enqueue order) before it judges them,
so a reserve, settle or sweep of another node either ran before (and the cancel sees its state)
or waits for the commit (a reserve skips the locked rows) — as a single job's cancel does."""

from __future__ import annotations

from functools import partial

from sepp.domain.policy import PolicyLookup
from sepp.domain.transitions import CancelAction
from sepp.domain.workflows import WorkflowCancel, WorkflowNode, WorkflowSummary
from sepp.storage import workflow_admin as shared
from sepp.storage.postgres.committer import Tx
from sepp.storage.postgres.reads import PgReads
from sepp.storage.postgres.sql import A

_LIST, _NODES = shared.pg(shared.LIST), shared.pg(shared.NODES)
_CANCEL_ROWS = shared.pg(shared.CANCEL_ROWS) + " FOR UPDATE"


async def cancel_workflow_op(workflow_id: bytes, now: int, policy: PolicyLookup, reason: str,
                             tx: Tx) -> WorkflowCancel:
    """``PostgresStore.cancel_workflow``: the rows locked, then the plan of
    ``workflow_admin.cancel_plan`` written node by node under the state guards of a single
    cancel (the ``jobs_dep_failed`` trigger applies the failure policies of jobs outside the
    workflow that depend on a cancelled node)."""
    conn = tx.conn
    rows = await conn.fetch(_CANCEL_ROWS, workflow_id)
    cancelled: list[bytes] = []
    requested: list[bytes] = []
    queues: set[str] = set()
    for seq, job_id, queue, decision in shared.cancel_plan(rows, now, policy, reason):
        if decision.action is CancelAction.CANCEL:
            await conn.execute(A["cancel_now"], decision.finished_at, decision.purge_at, decision.reason, seq)
            cancelled.append(job_id)
            queues.add(queue)
        else:
            await conn.execute(A["request_cancel"], seq)
            requested.append(job_id)
    return WorkflowCancel(bool(rows), cancelled, requested, sorted(queues))


class WorkflowAdminPg:
    """``PostgresStore.list_workflows``, ``workflow_nodes`` and ``cancel_workflow``."""

    _reads: PgReads

    async def list_workflows(self, before: bytes | None, limit: int) -> list[WorkflowSummary]:
        """See ``Store.list_workflows``."""
        return shared.summaries(await self._reads.fetch(_LIST, before or shared.TOP, limit))

    async def workflow_nodes(self, workflow_id: bytes) -> list[WorkflowNode]:
        """See ``Store.workflow_nodes``."""
        return shared.nodes(await self._reads.fetch(_NODES, workflow_id))

    async def cancel_workflow(self, workflow_id: bytes, now: int, policy: PolicyLookup,
                              reason: str) -> WorkflowCancel:
        """See ``Store.cancel_workflow``."""
        result: WorkflowCancel = await self._reads.submit(
            partial(cancel_workflow_op, workflow_id, now, policy, reason))
        return result


__all__ = ["WorkflowAdminPg", "cancel_workflow_op"]
