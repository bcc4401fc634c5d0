"""The settle operations of the PostgreSQL backend, run by the committer: acks and nacks
(one by one with the row locked, or the acks of live leases in one statement) and lease
extensions. What a settle does to a job is decided by ``sepp.domain.transitions``; these
lock the rows they judge (``FOR UPDATE``) and apply the decision under the lease guard.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sepp.domain.children import refused_children
from sepp.domain.clock import Clock
from sepp.domain.params import ExtendResult, SettleParams, SettleResult, granted_expiry
from sepp.domain.policy import PolicyLookup, PolicyTable
from sepp.domain.states import State
from sepp.domain.transitions import Decision, completed_purge_at, lease_error, nack, needs_jitter, settle
from sepp.storage.errors import StoreError
from sepp.storage.postgres.children import Placed, store_children
from sepp.storage.postgres.committer import Tx, notify_in
from sepp.storage.postgres.sql import Q
from sepp.storage.postgres.sql import rowcount as _count
from sepp.storage.row_types import AckedRow, LeaseLookup, at

_READY = int(State.READY)
_ID, _QUEUE, _SEQ = at(AckedRow, "id"), at(AckedRow, "queue"), at(AckedRow, "seq")




async def _apply(tx: Tx, seq: int, lease_id: bytes, queue: str, d: Decision, p: SettleParams,
                 wake: bool = False) -> None:
    """Write ``d`` to the job ``seq`` under its lease guard; an ack's decision writes the
    result of ``p`` (the item judged) with the completion."""
    if d.entry is None:
        result = p.result
        status = await tx.conn.execute(Q["complete_one"], d.finished_at, d.purge_at, seq, lease_id, result,
                                       None if result is None else p.result_encoding)
    else:
        status = await tx.conn.execute(Q["settle_update"], *d[:6], d.entry, seq, lease_id)
    if _count(status) != 1:  # the row is locked (settle_lookup FOR UPDATE): cannot happen
        raise StoreError(f"settle of job seq {seq} found its lease gone")
    if d.state == _READY or wake:  # wake: a flow-limited queue got a slot back
        tx.wake(queue)


async def settle_one(tx: Tx, p: SettleParams, policy: PolicyLookup,
                     placed: Mapping[bytes, Placed] | None = None) -> SettleResult:
    """Judge (``transitions.settle``) and apply one ack or nack, the row locked meanwhile. An
    ack with children stores them first (``children.store_children``; ``placed``: job id →
    its children's seqs), or fails the attempt when they are refused."""
    found = await tx.conn.fetchrow(Q["settle_lookup"], p.job_id)
    row = None if found is None else LeaseLookup._make(found)
    rand = random.uniform(-1.0, 1.0) if needs_jitter(p) else 0.0
    verdict = settle(None if row is None else row.held(), p, policy, rand)
    if isinstance(verdict, SettleResult):
        return verdict
    assert row is not None
    if p.children is not None and verdict.entry is None:  # an ack with children, about to complete
        assert placed is not None
        refusal = await store_children(tx, row.seq, p.children, placed[p.job_id], p.now)
        if refusal is not None:  # nothing stored: the attempt fails instead
            verdict = nack(row.held(), refused_children(p, refusal), policy(row.queue), rand)
    await _apply(tx, row.seq, p.lease_id, row.queue, verdict, p, policy(row.queue).wake_on_settle)
    return verdict.result(row.queue, row.started_at, row.job_type)


class SettleEachOp:
    """Settle items one by one, in job-id order (the items of one job in request order);
    results in request order. Two calls settling overlapping jobs (a worker re-sending a
    batch whose answer it lost, from another node) so lock their rows in the same order
    and wait for each other instead of deadlocking (each deadlock cost deadlock_timeout,
    1 s, before the committer's retry)."""

    __slots__ = ("items", "placed", "policy")

    def __init__(self, items: Sequence[SettleParams], policy: PolicyLookup,
                 placed: Mapping[bytes, Placed] | None = None) -> None:
        self.items, self.policy = items, policy
        #: Job id → the seqs of the children its ack carries (``settle_one``).
        self.placed = placed

    async def __call__(self, tx: Tx) -> list[SettleResult]:
        items = self.items
        results: list[SettleResult | None] = [None] * len(items)
        for i in sorted(range(len(items)), key=lambda i: items[i].job_id):  # stable: a job's items in order
            results[i] = await settle_one(tx, items[i], self.policy, self.placed)
        return results  # type: ignore[return-value]  # every index filled above


class AckManyOp:
    """A batched settle: the acks of live leases at ``now`` in one statement (the rule
    ``transitions.ack`` for many jobs), a queue's own completed retention applied after,
    then every ack the statement did not complete (refused or repeated) and every other item
    (``others``, by index) one by one. Rows are locked in job-id order (``acks`` sorted,
    then the rest sorted), so two calls acking overlapping jobs in different orders — a
    worker re-sending a batch whose answer it lost, through another node — wait for each
    other instead of deadlocking. Result: the rows of the completed jobs (job id, queue,
    attempt, seq, started_at or None, job_type), {job id: result} of the acks applied one by
    one, {index: result} of ``others``. When any ack carries a result, ``ack_many_results``
    writes each one's result with its completion."""

    __slots__ = ("acks", "default_keep", "now", "others", "placed", "policy")

    def __init__(self, acks: list[SettleParams], others: dict[int, SettleParams], now: int, default_keep: int,
                 policy: PolicyLookup, placed: Mapping[bytes, Placed] | None = None) -> None:
        self.acks, self.others, self.now, self.default_keep, self.policy = acks, others, now, default_keep, policy
        #: Job id → the seqs of the children an ack of ``others`` carries (``settle_one``).
        self.placed = placed

    async def __call__(self, tx: Tx) -> tuple[list[Any], dict[bytes, SettleResult], dict[int, SettleResult]]:
        conn, now = tx.conn, self.now
        acks = sorted(self.acks, key=_JOB_ID)
        rows = await _ack_many(conn, acks, now, self.default_keep)
        for queue in dict.fromkeys([r[_QUEUE] for r in rows]):  # each queue once, in row order
            pol = self.policy(queue)
            if pol.wake_on_settle:  # a flow-limited queue got slots back
                tx.wake(queue)
            if pol.completed_retention != self.default_keep:
                await conn.execute(Q["set_purge_at"], completed_purge_at(now, pol),
                                   [r[_SEQ] for r in rows if r[_QUEUE] == queue])
        refused: dict[bytes, SettleResult] = {}
        if len(rows) < len(acks):  # a row per completed ack (ids unique): some were not
            acked = {r[_ID] for r in rows}
            refused = {p.job_id: await settle_one(tx, p, self.policy) for p in acks if p.job_id not in acked}
        others = {i: await settle_one(tx, p, self.policy, self.placed)
                  for i, p in sorted(self.others.items(), key=lambda item: item[1].job_id)}
        return rows, refused, others

    async def run_alone(self, conn: Any, channel: str, origin: str
                        ) -> tuple[bool, Any, Callable[[], Awaitable[None]] | None]:
        """Acks only, and no queue whose completed retention differs from the default or
        whose settles wake reservers (``_plain``): the ``ack_many`` statement commits by
        itself (see the committer). Acks it did not complete (refused or repeated, rows it
        left untouched) are then judged one by one in a transaction of their own, as in
        ``__call__``."""
        if self.others or not _plain(self.policy, self.default_keep):
            return False, None, None
        acks = sorted(self.acks, key=_JOB_ID)
        rows = await _ack_many(conn, acks, self.now, self.default_keep)
        refused: dict[bytes, SettleResult] = {}
        if len(rows) < len(acks):
            acked = {r[_ID] for r in rows}
            async with conn.transaction():
                tx = Tx(conn)
                refused = {p.job_id: await settle_one(tx, p, self.policy) for p in acks if p.job_id not in acked}
                await notify_in(tx, channel, origin)
        return True, (rows, refused, {}), None


async def _ack_many(conn: Any, acks: list[SettleParams], now: int, keep: int) -> list[Any]:
    """Run the batched ack statement over ``acks`` (sorted by job id) at ``now``, completed
    retention ``keep`` µs: ``ack_many`` when none carries a result, else ``ack_many_results``
    (each result bound with its ack). Returns the rows of the jobs it completed."""
    ids, leases = [p.job_id for p in acks], [p.lease_id for p in acks]
    if all(p.result is None for p in acks):
        return await conn.fetch(Q["ack_many"], now, keep, ids, leases)  # type: ignore[no-any-return]
    return await conn.fetch(Q["ack_many_results"], now, keep, ids, leases,  # type: ignore[no-any-return]
                            [p.result for p in acks],
                            [None if p.result is None else p.result_encoding for p in acks])


def _plain(policy: PolicyLookup, keep: int) -> bool:
    """Whether no queue of ``policy`` (a ``PolicyTable``) keeps completed jobs other than
    ``keep`` µs or wakes reservers on settle: then a batched ack needs no second statement."""
    if not isinstance(policy, PolicyTable):
        return False
    return all(c.completed_retention == keep and not c.wake_on_settle
               for c in (policy.default, *policy.custom.values()))


#: The sort key of settle items by job id (their first field).
_JOB_ID = operator.itemgetter(0)


class ExtendOp:
    """``Store.extend``: push a live lease's expiry to ``expires_at`` (µs), moved on by the
    time the operation waited for its writer when there is a ``clock``
    (``params.granted_expiry``, read once the row is locked)."""

    __slots__ = ("clock", "expires_at", "job_id", "lease_id", "now", "progress")

    def __init__(self, job_id: bytes, lease_id: bytes, now: int, expires_at: int, clock: Clock | None = None,
                 progress: str | None = None) -> None:
        self.job_id, self.lease_id, self.now, self.expires_at, self.clock = job_id, lease_id, now, expires_at, clock
        self.progress = progress

    async def __call__(self, tx: Tx) -> ExtendResult:
        found = await tx.conn.fetchrow(Q["settle_lookup"], self.job_id)
        row = None if found is None else LeaseLookup._make(found)
        job = None if row is None else row.held()
        err = lease_error(job, self.lease_id, self.now)
        if err is not None:
            return ExtendResult(err)
        assert job is not None and row is not None
        expires_at = granted_expiry(self.now, self.expires_at, self.clock)
        if self.progress is None:
            await tx.conn.execute(Q["extend_lease"], expires_at, row.seq)
        else:
            await tx.conn.execute(Q["extend_lease_progress"], expires_at, self.progress, row.seq)
        return ExtendResult(None, expires_at, bool(job.cancel_requested), row.queue, row.job_type, job.attempt)
