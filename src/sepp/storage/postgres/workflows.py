"""``PostgresStore.enqueue_workflow`` (``sepp.storage.workflows``): a whole workflow — its
jobs, their edges, its id on each job and its idempotency key — in one transaction of the
committer."""

from __future__ import annotations

from collections.abc import Sequence

from sepp.domain.records import JobRow, QueueRecord
from sepp.storage.dependencies import CANCEL, DependsOn, Found, OnFailure, unpacked
from sepp.storage.errors import StoreError
from sepp.storage.postgres.committer import PgCommitter, Tx
from sepp.storage.postgres.enqueue import EnqueueOp, defer, dependencies
from sepp.storage.postgres.reads import PgReads
from sepp.storage.search import CustomEntry
from sepp.storage.workflows import WorkflowClaim, WorkflowDedup, row_found, stored_dependencies

#: Claim a workflow key ($1) for workflow $2 until $3 with job ids $4, unless a claim live at
#: $5 (now) holds it: one row when claimed, none when held (a concurrent claim of the same key
#: waits for the other transaction and then sees its row).
_CLAIM = """
INSERT INTO workflow_keys (idempotency_key, workflow_id, dedup_until, job_ids) VALUES ($1, $2, $3, $4)
ON CONFLICT (idempotency_key) DO UPDATE
    SET workflow_id = EXCLUDED.workflow_id, dedup_until = EXCLUDED.dedup_until, job_ids = EXCLUDED.job_ids
    WHERE workflow_keys.dedup_until <= $5
RETURNING workflow_id
"""
#: The holder of workflow key $1.
_HELD = "SELECT workflow_id, job_ids FROM workflow_keys WHERE idempotency_key = $1"
#: Stamp the jobs of seqs $2 with workflow id $1.
_STAMP = "UPDATE jobs SET workflow_id = $1 WHERE seq = ANY($2::bigint[])"
#: The rows of the call that other rows of it depend on: their completion releases them.
_MARK = "UPDATE jobs SET has_dependents = true WHERE seq = ANY($1::bigint[])"


class WorkflowOp:
    """The committer operation of ``PostgresStore.enqueue_workflow``: returns the earlier
    ``WorkflowDedup`` when the key is held (nothing written), else None."""

    __slots__ = ("claim", "custom", "dedup_until", "depends_on", "foreign", "lock_key", "new_queues", "now",
                 "on_failure", "rows", "seqs")

    def __init__(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                 new_queues: Sequence[QueueRecord], custom: Sequence[CustomEntry], depends_on: DependsOn,
                 on_failure: OnFailure, claim: WorkflowClaim, seqs: Sequence[int], foreign: Sequence[bytes]) -> None:
        self.rows, self.dedup_until, self.now, self.new_queues, self.custom = rows, dedup_until, now, new_queues, custom
        self.depends_on, self.on_failure, self.claim = depends_on, on_failure, claim
        #: Each row's seq and the rows' foreign ids (``EnqueueOp``).
        self.seqs, self.foreign = seqs, foreign
        #: Where the committer runs it among the keyed operations of a group (``EnqueueOp.lock_key``):
        #: ("", key) — before every job key (a queue name is never empty), workflow keys in order,
        #: so two groups claiming the same workflow keys wait for each other instead of deadlocking.
        self.lock_key = ("", claim.key)

    async def __call__(self, tx: Tx) -> WorkflowDedup | None:
        conn, claim, rows, seqs = tx.conn, self.claim, self.rows, self.seqs
        if claim.key:
            got = await conn.fetch(_CLAIM, claim.key, claim.workflow_id, claim.dedup_until,
                                   b"".join(row.id for row in rows), self.now)
            if not got:
                held = await conn.fetchrow(_HELD, claim.key)
                return WorkflowDedup(bytes(held[0]), unpacked(bytes(held[1])))
        stored = stored_dependencies(rows, self.depends_on)
        found: dict[bytes, Found] = await dependencies(conn, stored) if stored else {}
        dedups = await EnqueueOp(rows, self.dedup_until, self.now, self.new_queues, self.custom, seqs,
                                 self.foreign)(tx)
        if dedups:  # the admission refuses keyed nodes: nothing can be deduplicated here
            raise StoreError("a workflow's job was deduplicated by its idempotency key")
        await conn.execute(_STAMP, claim.workflow_id, list(seqs))
        if not self.depends_on:
            return None
        index = {row.id: i for i, row in enumerate(rows)}
        parents = sorted({seqs[index[d]] for ids in self.depends_on.values() for d in ids if d in index})
        if parents:
            await conn.execute(_MARK, parents)
        for row, s in zip(rows, seqs, strict=True):
            found[row.id] = Found(s, row.state, None)
        now = self.now
        for i, ids in self.depends_on.items():  # topological order: a row's parents of the call first
            policy = self.on_failure.get(i, CANCEL)
            await defer(conn, seqs[i], ids, found, policy, now)
            row_found(found, rows[i], seqs[i], ids, policy)
        return None


#: The jobs of workflow $1, in enqueue order.
_JOBS = "SELECT id FROM jobs WHERE workflow_id = $1 ORDER BY seq"


class WorkflowParts:
    """``PostgresStore.enqueue_workflow`` (a ``WorkflowOp`` of the committer, seqs as for
    ``enqueue``) and ``workflow_jobs`` (the read pool)."""

    _committer: PgCommitter
    _reads: PgReads

    async def _seqs(self, rows: Sequence[JobRow]) -> tuple[list[int], list[bytes]]:
        raise NotImplementedError

    async def enqueue_workflow(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                               new_queues: Sequence[QueueRecord], custom: Sequence[CustomEntry],
                               depends_on: DependsOn, on_failure: OnFailure,
                               claim: WorkflowClaim) -> WorkflowDedup | None:
        """See ``Store.enqueue_workflow``."""
        seqs, foreign = await self._seqs(rows)
        result: WorkflowDedup | None = await self._committer.submit(
            WorkflowOp(rows, dedup_until, now, new_queues, custom, depends_on, on_failure, claim, seqs, foreign),
            len(rows))
        return result

    async def workflow_jobs(self, workflow_id: bytes) -> list[bytes]:
        """See ``Store.workflow_jobs``."""
        return [bytes(r[0]) for r in await self._reads.fetch(_JOBS, workflow_id)]


__all__ = ["WorkflowOp", "WorkflowParts"]
