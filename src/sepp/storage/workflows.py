"""Workflows at enqueue, shared by the drivers (docs/workflows.md "Workflows").

``Store.enqueue_workflow`` stores the jobs of one ``EnqueueWorkflow`` call in one commit: each
row gets the workflow's id (``jobs.workflow_id``), and its dependencies (``depends_on``: row
index → 16-byte ids) may name **rows of the same call** as well as stored jobs. The driver
looks up the stored ones first (an id of no stored job: ``DependencyMissing``, nothing
written), inserts the rows, then records each row's dependencies in the order of
``depends_on`` — the caller gives it in topological order, so a row's parents of the call are
planned before it: a parent of the call is unfinished (READY, SCHEDULED or DEFERRED) and
waited for, unless it was itself stored CANCELLED (a "cancel" row whose stored dependency had
failed), which its dependents then see as a failed dependency.

An optional idempotency key (``WorkflowClaim.key``) is claimed in the same commit until
``dedup_until``; a live claim answers the earlier call (``WorkflowDedup``) and stores nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sepp.domain.records import JobRow
from sepp.domain.states import State
from sepp.storage.dependencies import CANCEL, DependsOn, Found, plan

_CANCELLED = int(State.CANCELLED)


class WorkflowClaim(NamedTuple):
    """The workflow a ``Store.enqueue_workflow`` call stores: its 16-byte ``workflow_id``, its
    idempotency ``key`` ("" = none) and how long the key is held (``dedup_until``, µs UTC)."""

    workflow_id: bytes
    key: str
    dedup_until: int


class WorkflowDedup(NamedTuple):
    """The earlier workflow a live idempotency key named: its 16-byte id and its jobs' 16-byte
    ids in node order (nothing of the call was stored)."""

    workflow_id: bytes
    job_ids: list[bytes]


def stored_dependencies(rows: Sequence[JobRow], depends_on: DependsOn) -> dict[int, list[bytes]]:
    """Row index → the ids it depends on that are not rows of the call (to look up as stored
    jobs), for the rows that name any."""
    own = {row.id for row in rows}
    out: dict[int, list[bytes]] = {}
    for i, ids in depends_on.items():
        outside = [d for d in ids if d not in own]
        if outside:
            out[i] = outside
    return out


def row_found(found: dict[bytes, Found], row: JobRow, seq: int, ids: Sequence[bytes] | None,
              policy: int) -> None:
    """Record in ``found`` (dependency id → what ``dependencies.plan`` reads of it) how row
    ``row`` (seq ``seq``, depending on ``ids`` or None, with failure ``policy``) stands after
    its own plan: CANCELLED, with its failed dependency's purge time, when its "cancel" policy
    met a failed dependency; else its stored state (unfinished: waited for)."""
    if ids and policy == CANCEL:
        failed = plan(ids, found, policy).failed
        if failed is not None:
            found[row.id] = Found(seq, _CANCELLED, failed[1].purge_at)
            return
    found[row.id] = Found(seq, row.state, None)


__all__ = ["WorkflowClaim", "WorkflowDedup", "row_found", "stored_dependencies"]
