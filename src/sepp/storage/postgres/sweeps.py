"""The sweeps of the PostgreSQL backend, run by the committer: promotion of due jobs,
the reclaim of expired leases (``transitions.reclaim`` decides; rows another node holds are
skipped) and the prune of finished jobs and expired idempotency keys.
"""

from __future__ import annotations

from sepp.domain.params import SweepResult, promotion
from sepp.domain.policy import PolicyLookup
from sepp.domain.states import State
from sepp.domain.transitions import reclaim
from sepp.storage.errors import StoreError
from sepp.storage.postgres.committer import Tx
from sepp.storage.postgres.reserve import Granting, promote
from sepp.storage.postgres.sql import Q
from sepp.storage.postgres.sql import rowcount as _count
from sepp.storage.row_types import ExpiredRow

_READY, _DEAD = int(State.READY), int(State.DEAD_LETTERED)


class PromoteOp:
    """``Store.promote_due``."""

    __slots__ = ("limit", "now")

    def __init__(self, now: int, limit: int) -> None:
        self.now, self.limit = now, limit

    async def __call__(self, tx: Tx) -> SweepResult:
        return promotion(await promote(tx, self.now, self.limit))


class ReclaimOp:
    """``Store.reclaim_expired``: each expired lease (locked, skipping the ones another node
    holds) back to READY, or CANCELLED / DEAD_LETTERED as ``transitions.reclaim`` decides."""

    __slots__ = ("granting", "limit", "now", "policy")

    def __init__(self, now: int, limit: int, policy: PolicyLookup, granting: Granting | None = None) -> None:
        self.now, self.limit, self.policy, self.granting = now, limit, policy, granting

    async def __call__(self, tx: Tx) -> SweepResult:
        # Not past the grant time of a reserve of this node that is writing its leases right
        # now: it must not be handed a job whose lease ends after its grant (``Granting``).
        conn, now = tx.conn, (self.now if self.granting is None else self.granting.cutoff(self.now))
        woke: set[str] = set()
        dead: dict[str, int] = {}
        expired: dict[str, int] = {}
        types: dict[tuple[str, str, int], int] = {}
        changed: list[tuple[bytes, str, str, int, int]] = []
        await conn.execute(Q["sweep_no_jit"])
        rows = await conn.fetch(Q["expired_leases"], now, self.limit)
        for found in rows:
            r = ExpiredRow._make(found)
            seq, queue, lease_id = r.seq, r.queue, r.lease_id
            expired[queue] = expired.get(queue, 0) + 1
            d = reclaim(r.lease(), now, self.policy)
            if d.run_at is None:
                status = await conn.execute(Q["reclaim_ready"], d.state, d.entry, seq, lease_id)
            else:
                status = await conn.execute(Q["settle_update"], *d[:6], d.entry, seq, lease_id)
            if _count(status) != 1:
                raise StoreError(f"reclaim of job seq {seq} found it no longer leased")
            if d.state == _READY:
                woke.add(queue)
                tx.wake(queue)
            elif self.policy(queue).wake_on_settle:  # a flow-limited slot freed: other nodes
                tx.wake(queue)
            if d.state == _DEAD:
                dead[queue] = dead.get(queue, 0) + 1
            key = (queue, r.job_type, d.state)
            types[key] = types.get(key, 0) + 1
            changed.append((bytes(r.id), queue, r.job_type, d.state, d.attempt))
        return SweepResult(len(rows), frozenset(woke), dead, expired=expired, expired_types=types,
                           reclaimed_jobs=tuple(changed))


class PruneOp:
    """``Store.prune``: finished jobs past retention, then expired idempotency keys (of jobs,
    then of workflows)."""

    __slots__ = ("limit", "now")

    def __init__(self, now: int, limit: int) -> None:
        self.now, self.limit = now, limit

    async def __call__(self, tx: Tx) -> SweepResult:
        jobs = _count(await tx.conn.execute(Q["prune_jobs"], self.now, self.limit))
        keys = _count(await tx.conn.execute(Q["prune_idempotency"], self.now, self.limit))
        keys += _count(await tx.conn.execute(Q["prune_workflow_keys"], self.now, self.limit))
        return SweepResult(jobs + keys)
