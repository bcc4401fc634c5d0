"""Waiting for a whole workflow (``WaitJobs`` given a workflow id; docs/workflows.md "Waiting
for a workflow"): what ``sepp.server.waiting`` answers for an id that is no job but a
workflow's.

A workflow is **finished when every one of its stored nodes is** (COMPLETED, DEAD_LETTERED or
CANCELLED). Its outcome is one ``JobOutcome`` under the workflow's id:

* every node COMPLETED → COMPLETED, with the result of its **sink** — the one node no other
  node of the workflow runs after (a chain's last step, a chord's callback); no result when it
  has several sinks (a group: wait for its nodes' ids for theirs);
* otherwise the state of its first failed node in node order (DEAD_LETTERED or CANCELLED),
  the reason ``WORKFLOW_FAILED: node <id> (<job type>) was dead-lettered: <its reason>`` and
  that node's attempt history (so its last error is the outcome's).

Queue and job type are the sink's (the last node's when there are several), ``finished_at``
the latest of the nodes'. A workflow whose nodes total more than ``MAX_WORKFLOW_NODES`` across
one wait is refused (``InvalidRequest``); the expansion is read only for an id that is no job,
so a wait for jobs costs what it did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sepp.domain.ids import job_id_text
from sepp.domain.outcomes import FINISHED_STATES, JobOutcome
from sepp.domain.states import State
from sepp.domain.workflows import WorkflowNode
from sepp.hard_limits import MAX_WAIT_JOBS, MAX_WORKFLOW_NODES
from sepp.server.errors import InvalidRequest
from sepp.storage.base import Store

_COMPLETED = int(State.COMPLETED)


async def expand(store: Store, missing: Sequence[bytes], known: Mapping[bytes, Sequence[WorkflowNode]],
                 ) -> dict[bytes, list[WorkflowNode]]:
    """The nodes of each id of ``missing`` (ids of no stored job) that is a workflow's, read
    once per wait (``known``: those read already). Raises ``InvalidRequest`` (field
    ``job_ids``) when the workflows of one wait hold more than ``MAX_WORKFLOW_NODES`` nodes."""
    found = {wf: list(nodes) for wf, nodes in known.items()}
    for raw in missing:
        if raw not in found:
            nodes = await store.workflow_nodes(raw)
            if nodes:
                found[raw] = nodes
    total = sum(len(n) for n in found.values())
    if total > MAX_WORKFLOW_NODES:
        raise InvalidRequest(f"the workflows of one wait hold at most {MAX_WORKFLOW_NODES} nodes (got {total})",
                             "job_ids", MAX_WORKFLOW_NODES, total)
    return found


async def node_outcomes(store: Store, workflows: Mapping[bytes, Sequence[WorkflowNode]]) -> dict[bytes, JobOutcome]:
    """Every node's stored outcome (``Store.job_outcomes``, at most ``MAX_WAIT_JOBS`` ids a read)."""
    ids = [n.id for nodes in workflows.values() for n in nodes]
    rows: dict[bytes, JobOutcome] = {}
    for at in range(0, len(ids), MAX_WAIT_JOBS):
        rows.update((row.id, row) for row in await store.job_outcomes(ids[at:at + MAX_WAIT_JOBS]))
    return rows


def workflow_outcome(workflow_id: bytes, nodes: Sequence[WorkflowNode],
                     rows: Mapping[bytes, JobOutcome]) -> JobOutcome:
    """The workflow's outcome under its id (see the module) when every node still stored is
    finished; otherwise a row in no finished state (its queue the first unfinished node's: what
    a wake-up by queue finds the wait by). A node purged meanwhile counts as finished."""
    now = [rows[n.id] for n in nodes if n.id in rows]
    pending = next((r for r in now if r.state not in FINISHED_STATES), None)
    if pending is not None:
        return JobOutcome(workflow_id, pending.queue, pending.job_type, int(State.DEFERRED), 0, None, None, None,
                          None, None, None)
    parents = {d for n in nodes for d in n.depends_on}
    sinks = [r for r in now if r.id not in parents] or now[-1:]
    last = sinks[-1] if sinks else None
    queue, job_type = (last.queue, last.job_type) if last else ("", "")
    finished_at = max((r.finished_at or 0 for r in now), default=0) or None
    failed = next((r for r in now if r.state != _COMPLETED), None)
    if failed is not None:
        what = "dead-lettered" if failed.state == int(State.DEAD_LETTERED) else "cancelled"
        reason = f"WORKFLOW_FAILED: node {job_id_text(failed.id)} ({failed.job_type}) was {what}"
        if failed.reason:
            reason += f": {failed.reason}"
        return JobOutcome(workflow_id, queue, job_type, failed.state, failed.attempt, finished_at, reason,
                          failed.history, failed.worker_id, failed.node, failed.started_at)
    result = sinks[0] if len(sinks) == 1 else None
    return JobOutcome(workflow_id, queue, job_type, _COMPLETED, result.attempt if result else 0, finished_at, None,
                      None, None, None, None, result.result if result else None,
                      result.result_encoding if result else None)


__all__ = ["expand", "node_outcomes", "workflow_outcome"]
