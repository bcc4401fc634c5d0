"""Writer side of ``SQLiteStore.enqueue_workflow`` (``sepp.storage.workflows``): a whole
workflow — its jobs, their edges, its id on each job and its idempotency key — in the one
transaction of the operation."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import partial

from sepp.domain.records import JobRow, QueueRecord
from sepp.storage.dependencies import CANCEL, DependsOn, Found, OnFailure, missing_of, unpacked
from sepp.storage.errors import DependencyMissing, StoreError
from sepp.storage.search import CustomEntry
from sepp.storage.sqlite import ops
from sepp.storage.sqlite.committer import Committer
from sepp.storage.sqlite.reads import SQLiteReads
from sepp.storage.sqlite.sql import Q
from sepp.storage.sqlite.writer_process import ProcessCommitter
from sepp.storage.workflows import WorkflowClaim, WorkflowDedup, row_found, stored_dependencies

#: The live holder of a workflow key: ?1 key, ?2 now.
_HELD = "SELECT workflow_id, job_ids FROM workflow_keys WHERE idempotency_key = ?1 AND dedup_until > ?2"
#: Claim a workflow key (replacing an expired claim): key, workflow id, dedup_until, job ids.
_CLAIM = "INSERT OR REPLACE INTO workflow_keys (idempotency_key, workflow_id, dedup_until, job_ids) VALUES (?, ?, ?, ?)"
#: Stamp a job of the workflow: workflow id, job id.
_STAMP = "UPDATE jobs SET workflow_id = ? WHERE id = ?"
#: The jobs of workflow ?1, in enqueue order.
_JOBS = "SELECT id FROM jobs WHERE workflow_id = ? ORDER BY seq"


def enqueue_workflow_op(rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                        new_queues: Sequence[QueueRecord], custom: Sequence[CustomEntry], depends_on: DependsOn,
                        on_failure: OnFailure, claim: WorkflowClaim,
                        conn: sqlite3.Connection) -> WorkflowDedup | None:
    """Store the workflow ``claim`` of ``rows`` (see ``Store.enqueue_workflow``). Returns the
    earlier workflow when ``claim.key`` is held (nothing written), else None. Raises
    ``DependencyMissing`` (nothing written) when a dependency is neither a row of the call nor
    a stored job."""
    if claim.key:
        held = conn.execute(_HELD, (claim.key, now)).fetchone()
        if held is not None:
            return WorkflowDedup(bytes(held[0]), unpacked(held[1]))
    stored = stored_dependencies(rows, depends_on)
    found = ops.stored_found(conn, stored)
    missing = missing_of(stored, found)
    if missing:
        raise DependencyMissing(missing)
    dedups = ops.enqueue_op(rows, dedup_until, now, new_queues, custom, conn)
    if dedups:  # the admission refuses keyed nodes: nothing can be deduplicated here
        raise StoreError("a workflow's job was deduplicated by its idempotency key")
    wf = claim.workflow_id
    # A row with dependencies is stamped by its deferral (ops.defer: its row written once);
    # the others here, each then looked up for its seq (its dependents' edges name it).
    free = [row for i, row in enumerate(rows) if i not in depends_on]
    conn.executemany(_STAMP, [(wf, row.id) for row in free])
    if depends_on:
        seq = Q["job_seq"]
        for row in free:
            found[row.id] = Found(conn.execute(seq, (row.id,)).fetchone()[0], row.state, None)
        for i, ids in depends_on.items():  # topological order: a row's parents of the call first
            policy = on_failure.get(i, CANCEL)
            row_found(found, rows[i], ops.defer(conn, rows[i].id, ids, found, policy, now, wf), ids, policy)
    if claim.key:
        conn.execute(_CLAIM, (claim.key, wf, claim.dedup_until, b"".join(row.id for row in rows)))
    return None


class WorkflowWrites:
    """``SQLiteStore.enqueue_workflow`` (one operation of the writer) and ``workflow_jobs`` (a read)."""

    _committer: Committer | ProcessCommitter
    _reads: SQLiteReads

    async def enqueue_workflow(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                               new_queues: Sequence[QueueRecord], custom: Sequence[CustomEntry],
                               depends_on: DependsOn, on_failure: OnFailure,
                               claim: WorkflowClaim) -> WorkflowDedup | None:
        """See ``Store.enqueue_workflow`` (``enqueue_workflow_op`` in the writer)."""
        op = partial(enqueue_workflow_op, rows, dedup_until, now, new_queues, custom, depends_on, on_failure, claim)
        result: WorkflowDedup | None = await self._committer.submit(op, len(rows))
        return result

    async def workflow_jobs(self, workflow_id: bytes) -> list[bytes]:
        """See ``Store.workflow_jobs``."""
        return [bytes(r[0]) for r in await self._reads.read(_JOBS, (workflow_id,))]


__all__ = ["WorkflowWrites", "enqueue_workflow_op"]
