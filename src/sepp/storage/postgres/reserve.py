"""The reserve operations of the PostgreSQL backend, run by the committer: promote due
jobs, then lease READY jobs with ``FOR UPDATE SKIP LOCKED`` (no job leased twice, however
many nodes reserve), under the queues' flow limits (``flow``); and the burial of leased
jobs the server could not deliver.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sepp.domain.params import DAMAGED_ROW, ReserveParams, SweepResult, promotion
from sepp.storage.postgres import flow
from sepp.storage.postgres.committer import Tx, notifier
from sepp.storage.postgres.sql import Q
from sepp.storage.postgres.sql import rowcount as _count
from sepp.storage.row_types import LeasedRow, at

_PRIORITY, _RUN_AT, _SEQ = at(LeasedRow, "priority"), at(LeasedRow, "run_at"), at(LeasedRow, "seq")
_PAYLOAD, _HISTORY = at(LeasedRow, "payload"), at(LeasedRow, "history")
#: A promotion that made nothing READY.
_NOTHING = SweepResult(0)


def _reserve_order(r: Any, priority: int = _PRIORITY, run_at: int = _RUN_AT, seq: int = _SEQ) -> tuple[int, int, int]:
    """The sort key of a leased row (``LeasedRow``): priority DESC, run_at, seq (the positions
    are bound as defaults: locals, read faster than globals on this per-row path)."""
    return -r[priority], r[run_at], r[seq]


def _leased_bytes(rows: Sequence[Any]) -> int:
    """The bytes of leased rows (``LeasedRow``) as ``lease_within`` counts them: payload
    bytes plus the history's UTF-8 bytes."""
    payload, history = _PAYLOAD, _HISTORY
    return sum(len(r[payload]) + (len(r[history].encode()) if r[history] else 0) for r in rows)


async def promote(tx: Tx, now: int, limit: int) -> list[Any]:
    """Due SCHEDULED jobs → READY (``promote_due``); one (queue, run_at, id, job type,
    attempt) row per job (``params.promotion``)."""
    rows = await tx.conn.fetch(Q["promote_due"], now, limit)
    for q in {row[0] for row in rows}:
        tx.wake(q)
    return list(rows)


class Granting:
    """The grant times (µs UTC) of this node's reserves that read their clock and have not
    finished their leasing statements yet; a reclaim pass reclaims no lease that ends after
    the earliest of them (``cutoff``). Without it, a reclaim whose clock reading came after
    a reserve's, committed on another writer connection before that reserve's statement
    ran, would hand the reserve a job whose old lease ended after the reserve's grant time:
    two lease windows overlapping on paper. With it, on one node, a new lease never starts
    before the end of the lease it follows (docs/decisions.md "A lease runs from when it
    is granted"). Touched only on the event loop; a handful of entries at most (one per
    writer connection)."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: list[int] = []

    def begin(self, granted: int) -> None:
        """A reserve stamps its leases with ``granted`` (µs) from now until ``end(granted)``."""
        self._open.append(granted)

    def end(self, granted: int) -> None:
        """The reserve that called ``begin(granted)`` wrote its leases (or failed)."""
        self._open.remove(granted)

    def cutoff(self, now: int) -> int:
        """The time (µs) a reclaim pass read as ``now`` may reclaim the leases ending up to:
        ``now``, or the earliest open grant time when that is earlier."""
        return min(now, *self._open) if self._open else now


class ReserveOp:
    """``Store.reserve``: promote due jobs, then lease up to ``max_jobs`` READY jobs from the
    queues in order. Result: per queue with jobs (queue, lease expiry µs, rows in reserve
    order).

    The time its leases are stamped with (``granted``) is ``params.grant_time()`` read when
    the committer runs the operation, after the promotion (which may wait for another
    reserver's flow lock) and right before the leasing statements — so after its wait in
    the commit queue, for a new connection or for a lock: a lease runs from when it is
    granted, not from when the call came (docs/decisions.md "A lease runs from when it is
    granted"). ``granting`` (the store's ``Granting``) holds that time while the leasing
    statements run, so that no reclaim on this node frees a lease ending after it
    meanwhile. Each run of the operation (a group run again one by one, a retried
    deadlock) reads it afresh."""

    __slots__ = ("granted", "granting", "lease_id", "params", "promoted", "promoted_at")

    def __init__(self, params: ReserveParams, lease_id: bytes, granting: Granting | None = None) -> None:
        self.params, self.lease_id, self.granting = params, lease_id, granting
        #: What the promotion made READY (the last run; ``Store.on_promoted``), and the time
        #: it promoted at (µs UTC).
        self.promoted: SweepResult = _NOTHING
        self.promoted_at = params.now
        #: The grant time of the last run (µs UTC): the jobs' ``started_at``.
        self.granted = params.now

    async def __call__(self, tx: Tx) -> list[tuple[str, int, list[Any]]]:
        p, conn = self.params, tx.conn
        now = p.grant_time()  # what is due; the leases read the clock again (``_lease``)
        locking = flow.lock_queues(p.flow, p.queues) if p.flow else []
        if locking:  # the flow locks ride on the promotion statement (measured: docs/decisions.md)
            rows = await flow.promote_locking(conn, now, 10_000, locking)
            for q in {row[0] for row in rows}:
                tx.wake(q)
        else:
            rows = await promote(tx, now, 10_000)
        self.promoted, self.promoted_at = promotion(rows) if rows else _NOTHING, now
        return await self._lease(conn)

    async def run_alone(self, conn: Any, channel: str, origin: str
                        ) -> tuple[bool, Any, Callable[[], Awaitable[None]] | None]:
        """One queue without flow limits (whose locks must last from the promotion to the
        lease): the promotion and the lease as two statements that commit by themselves (see
        the committer). Each is atomic on its own: a failure or crash between them leaves
        due jobs promoted (what the sweep does anyway), never a job leased for an answer
        that fails. Several queues take the transaction path, so a failure on a later queue
        rolls back the leases of the earlier ones instead of leaving them to expire."""
        if self.params.flow or len(self.params.queues) != 1:
            return False, None, None
        now = self.params.grant_time()
        rows = await conn.fetch(Q["promote_due"], now, 10_000)
        woken = sorted({row[0] for row in rows})
        self.promoted, self.promoted_at = promotion(rows) if rows else _NOTHING, now
        out = await self._lease(conn)
        return True, out, (notifier(conn, channel, origin, woken) if woken else None)

    async def _lease(self, conn: Any) -> list[tuple[str, int, list[Any]]]:
        """Lease up to ``max_jobs`` READY jobs of the queues in order (the promotion done),
        stamped with the grant time read here (``granted``)."""
        now = self.granted = self.params.grant_time()
        granting = self.granting
        if granting is None:
            return await self._lease_at(conn, now)
        granting.begin(now)
        try:
            return await self._lease_at(conn, now)
        finally:
            granting.end(now)

    async def _lease_at(self, conn: Any, now: int) -> list[tuple[str, int, list[Any]]]:
        p = self.params
        out: list[tuple[str, int, list[Any]]] = []
        want = p.max_jobs
        budget, used = p.max_bytes, 0
        for queue in p.queues:
            if want <= 0 or (budget and used >= budget):
                break
            limits = p.flow.get(queue)
            expires = now + p.lease_for[queue]
            if limits is not None:
                allowed, bucket, sizes, held = await flow.ready(conn, queue, limits, want, now)
                if allowed <= 0:
                    continue  # a flow limit holds the queue's jobs back: fewer jobs, no error
                if flow.may_bind_per_key(limits, held, allowed):
                    seqs, used = await flow.key_seqs(conn, queue, limits, allowed, budget, used, bool(out))
                else:
                    seqs, used = _within(sizes, budget, used, bool(out))
                rows = (await flow.lease(conn, queue, bucket, seqs, self.lease_id, expires, p.worker_id, now, p.node)
                        if seqs else [])
            elif not budget:
                rows = await conn.fetch(Q["lease_ready"], queue, want, self.lease_id, expires, p.worker_id, now,
                                        p.node)
            else:  # the byte budget is applied by the leasing statement itself (one round trip)
                rows = await conn.fetch(Q["lease_within"], queue, want, self.lease_id, expires, p.worker_id, now,
                                        p.node, budget - used, not out)
                used += _leased_bytes(rows)  # as n in SQL
            if not rows:
                continue
            rows = sorted(rows, key=_reserve_order)
            out.append((queue, expires, rows))
            want -= len(rows)
        return out


def _within(sizes: Sequence[Any], budget: int, used: int, have: bool) -> tuple[list[int], int]:
    """The seqs of the (seq, bytes) rows ``sizes`` to lease within the byte ``budget`` (0 =
    none) and the call's bytes after them (``used`` before): a prefix, whose first job is
    always taken when the call has none yet (``have`` False)."""
    take: list[int] = []
    for seq, n in sizes:
        if budget and used + n > budget and (take or have):
            break
        take.append(seq)
        used += n
    return take, used


class BuryLeasedOp:
    """``Store.reserve_damaged``: dead-letter leased jobs the server could not deliver."""

    __slots__ = ("leases", "now")

    def __init__(self, leases: list[tuple[bytes, bytes]], now: int) -> None:
        self.leases, self.now = leases, now

    async def __call__(self, tx: Tx) -> int:
        n = 0
        for job_id, lease_id in self.leases:
            status = await tx.conn.execute(Q["bury_leased"], self.now, DAMAGED_ROW, job_id, lease_id)
            n += _count(status)
        return n
