"""The admin side of workflows shared by the drivers (docs/workflows.md "Seeing and steering
a workflow"): the SQL of ``Store.list_workflows`` / ``workflow_nodes`` / the rows a
``cancel_workflow`` judges, written once in the dialect both backends take (``?1`` numbered
parameters; ``pg`` turns them into PostgreSQL's ``$1``), the value types built from their
rows, and the plan of a workflow cancel (``cancel_plan``).

Every statement is driven by the ``jobs_workflow`` index (``jobs.workflow_id``, partial: only
jobs of a workflow): the listing seeks it once per workflow listed (a loose index scan, highest
id first), never a scan of the jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sepp.domain.policy import PolicyLookup
from sepp.domain.transitions import CancelAction, CancelDecision, cancel
from sepp.domain.workflows import WorkflowNode, WorkflowSummary, children_first, counts_of, last_error_of
from sepp.storage.dependencies import unpacked

#: Sorts above every 16-byte workflow id (bytes compare as unsigned, a longer value after its
#: prefix): the listing's start.
TOP = b"\xff" * 17

#: Up to ?2 workflows whose id sorts below ?1, highest first, each as rows (id, state, jobs in
#: that state, earliest enqueued_at): a loose index scan of ``jobs_workflow`` (one seek per
#: workflow), then that workflow's jobs through the same index.
LIST = """
WITH RECURSIVE w(id, n) AS (
    SELECT (SELECT workflow_id FROM jobs WHERE workflow_id < ?1 ORDER BY workflow_id DESC LIMIT 1), 1
    UNION ALL
    SELECT (SELECT workflow_id FROM jobs WHERE workflow_id < w.id ORDER BY workflow_id DESC LIMIT 1), w.n + 1
    FROM w WHERE w.id IS NOT NULL AND w.n < ?2
)
SELECT w.id, j.state, count(*), min(j.enqueued_at) FROM w JOIN jobs j ON j.workflow_id = w.id
GROUP BY w.id, j.state
"""

#: The jobs of workflow ?1 in enqueue order (= the call's node order): the columns of
#: ``WorkflowNode`` (history only of a DEAD_LETTERED job, for its last error).
NODES = """
SELECT id, seq, queue, job_type, state, depends_on, reason, CASE WHEN state = 5 THEN history END,
       enqueued_at, finished_at, cancel_requested, attempt
FROM jobs WHERE workflow_id = ?1 ORDER BY seq
"""

#: What a workflow cancel judges of workflow ?1's jobs: seq, id, queue, state, depends_on.
CANCEL_ROWS = "SELECT seq, id, queue, state, depends_on FROM jobs WHERE workflow_id = ?1 ORDER BY seq"


def pg(sql: str) -> str:
    """``sql`` with PostgreSQL's parameter marks (``?1`` → ``$1``)."""
    return sql.replace("?", "$")


def summaries(rows: Iterable[Sequence[Any]]) -> list[WorkflowSummary]:
    """``WorkflowSummary`` per workflow of ``LIST``'s rows, highest id (newest) first."""
    states: dict[bytes, list[tuple[int, int]]] = {}
    created: dict[bytes, int] = {}
    for wf, state, n, first in rows:
        key = bytes(wf)
        states.setdefault(key, []).append((int(state), int(n)))
        created[key] = min(created.get(key, first), first)
    return [WorkflowSummary(wf, created[wf], counts_of(states[wf])) for wf in sorted(states, reverse=True)]


def nodes(rows: Iterable[Sequence[Any]]) -> list[WorkflowNode]:
    """``WorkflowNode`` per row of ``NODES``."""
    out = []
    for job_id, seq, queue, job_type, state, deps, reason, history, enqueued_at, finished_at, asked, attempt in rows:
        out.append(WorkflowNode(bytes(job_id), seq, queue, job_type, int(state),
                                tuple(unpacked(bytes(deps) if deps is not None else None)), reason or "",
                                last_error_of(int(state), history), enqueued_at, finished_at, bool(asked),
                                int(attempt)))
    return out


def cancel_plan(rows: Sequence[Sequence[Any]], now: int, policy: PolicyLookup,
                reason: str) -> list[tuple[int, bytes, str, CancelDecision]]:
    """What a workflow cancel at ``now`` (µs) writes, from ``CANCEL_ROWS``' rows: (seq, id,
    queue, ``transitions.cancel``'s decision with ``reason``) for each node it changes — CANCEL
    (SCHEDULED, READY, DEFERRED) or REQUEST (RESERVED) — every node before the nodes it depends
    on (``children_first``), so each is cancelled naming ``reason``, not as the failed
    dependency of a parent cancelled first. Finished nodes are left out."""
    ids = [bytes(r[1]) for r in rows]
    order = children_first([(ids[i], unpacked(bytes(r[4]) if r[4] is not None else None))
                            for i, r in enumerate(rows)])
    plan = []
    for i in order:
        seq, _id, queue, state, _deps = rows[i]
        decision = cancel(int(state), now, policy(queue), reason)
        if decision.action in (CancelAction.CANCEL, CancelAction.REQUEST):
            plan.append((seq, ids[i], queue, decision))
    return plan


__all__ = ["CANCEL_ROWS", "LIST", "NODES", "TOP", "cancel_plan", "nodes", "pg", "summaries"]
