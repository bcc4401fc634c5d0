"""The write operations of the PostgreSQL backend, run by the committer inside a group
transaction (``committer.Tx``): enqueue, reserve, settle, extend and the sweeps.

What a settle, a reclaim or an expiry does to a job is decided by
``sepp.domain.transitions``; these functions lock the rows they judge (``FOR UPDATE``, or
``FOR UPDATE SKIP LOCKED`` where another node may take the row instead) and apply the
decision under the lease guard, so several nodes can run each of them at the same moment
.
"""

from __future__ import annotations

import json
import logging
import operator
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sepp.domain.clock import Clock
from sepp.domain.params import (
    DAMAGED_ROW,
    ExtendResult,
    ReserveParams,
    SettleKind,
    SettleParams,
    SettleResult,
    SweepResult,
    granted_expiry,
)
from sepp.domain.policy import PolicyLookup, PolicyTable
from sepp.domain.records import Dedups, JobRow, NodeRecord, QueueRecord, WorkerRecord
from sepp.domain.states import State
from sepp.domain.transitions import Decision, ExpiredLease, HeldJob, completed_purge_at, lease_error, reclaim, settle
from sepp.storage.errors import StoreError
from sepp.storage.postgres import flow
from sepp.storage.postgres.committer import FoldableOp, Tx, notifier, notify_in
from sepp.storage.postgres.sql import Q
from sepp.storage.postgres.sql import rowcount as _count
from sepp.storage.search import CustomEntry

_READY, _DEAD = int(State.READY), int(State.DEAD_LETTERED)
log = logging.getLogger("sepp.storage.postgres")


# ---------------------------------------------------------------------- enqueue


def columns(rows: Sequence[Sequence[Any]]) -> list[Any]:
    """``rows`` as one list per column (the parameters of ``insert_jobs``)."""
    return [list(col) for col in zip(*rows, strict=True)]


#: The columns of an insert record (a JobRow's, then its seq), for COPY.
JOB_COLUMNS = ("id", "queue", "job_type", "state", "priority", "run_at", "enqueued_at", "max_attempts", "payload",
               "encoding", "extras", "idempotency_key", "seq")
#: From this many rows on, an insert is a binary COPY (measured: about 30% less time per row
#: than the unnest INSERT at 256 rows, but an extra round trip for the column types).
COPY_FROM = 64

#: An insert record: a JobRow's 12 fields, then its seq — the one its id carries, or for a
#: foreign id one of this node's blocks (``PostgresStore.enqueue``, ``ids.JobIds``).
Record = tuple[Any, ...]


async def insert(tx: Tx, records: Sequence[Record]) -> None:
    """Insert ``records`` (``Record``: one statement, or a COPY for many) and note the queues
    of READY rows for NOTIFY."""
    if not records:
        return
    conn = tx.conn
    if len(records) == 1:
        await conn.execute(Q["insert_job"], *records[0])
    elif len(records) >= COPY_FROM:
        await conn.copy_records_to_table("jobs", records=records, columns=JOB_COLUMNS)
    else:
        await conn.execute(Q["insert_jobs"], *columns(records))
    for r in records:
        if r[3] == _READY:
            tx.wake(r[1])


class InsertOp(FoldableOp):
    """A plain enqueue (no idempotency key, no new queue): the committer folds the plain
    enqueues of a group into one multi-row INSERT (``committer.FoldableOp``). ``rows``:
    insert records (``Record``)."""

    __slots__ = ()

    @staticmethod
    async def run_all(tx: Tx, rows: list[Any]) -> None:
        """Insert the rows of every folded enqueue in one statement."""
        await insert(tx, rows)

    @staticmethod
    async def run_autocommit(conn: Any, rows: list[Any], channel: str, origin: str
                             ) -> tuple[bool, Callable[[], Awaitable[None]] | None]:
        """The group's rows as one statement that commits by itself: fewer than ``COPY_FROM``
        rows as one INSERT carrying its NOTIFY (``insert_jobs_notify``: one round trip), more
        as one binary COPY (measured: 1.85 ms instead of 2.2 ms for 256 rows in BEGIN / COPY
        / NOTIFY / COMMIT) whose NOTIFY the committer sends after answering the producers. A
        NOTIFY that fails after the COPY committed does not fail the enqueue: it is a wake-up
        hint, every long poll ends by its own deadline anyway, and a broken connection is
        found by the next group."""
        ready = sorted({row[1] for row in rows if row[3] == _READY})
        payload = json.dumps({"o": origin, "q": ready}) if ready else None
        if len(rows) < COPY_FROM:
            await conn.execute(Q["insert_jobs_notify"], *columns(rows), channel, payload)
            return True, None
        await conn.copy_records_to_table("jobs", records=rows, columns=JOB_COLUMNS)
        if payload is None:
            return True, None

        async def notify() -> None:
            try:
                await conn.execute(Q["notify"], channel, payload)
            except Exception as exc:  # committed already: see the docstring
                log.warning("jobs stored, but their wake-up notification was not sent: %s: %s",
                            type(exc).__name__, exc)

        return True, notify


class EnqueueOp:
    """An enqueue with idempotency keys, new queues or custom-index entries (``Store.enqueue``;
    ``custom``: the entries of every row, a deduplicated row's left out)."""

    __slots__ = ("custom", "dedup_until", "foreign", "lock_key", "new_queues", "now", "rows", "seqs")

    def __init__(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                 new_queues: Sequence[QueueRecord], custom: Sequence[CustomEntry] = (),
                 seqs: Sequence[int] = (), foreign: Sequence[bytes] = ()) -> None:
        self.rows, self.dedup_until, self.now, self.new_queues = rows, dedup_until, now, new_queues
        self.custom = custom
        #: Each row's seq (``Record``).
        self.seqs = seqs
        #: The rows' foreign ids (``PostgresStore.enqueue``): refused if a row has one as
        #: its native id (``native_taken``).
        self.foreign = foreign
        #: The first (queue, key) this operation locks: the committer runs the keyed
        #: enqueues of a group in this order, so two groups claiming the same hot keys
        #: lock them in the same order and wait instead of deadlocking (finding B6).
        self.lock_key = min(((r.queue, r.idempotency_key) for r in rows if r.idempotency_key), default=("", ""))

    async def __call__(self, tx: Tx) -> Dedups:
        conn, now = tx.conn, self.now
        if self.foreign:
            taken = await conn.fetch(Q["native_taken"], list(self.foreign))
            if taken:
                raise StoreError(f"PostgreSQL: duplicate job id {bytes(taken[0][0]).hex()}: a job has it already")
        for q in self.new_queues:
            await conn.execute(Q["insert_queue_if_absent"], q.name, q.settings_json, q.paused, q.declared, now, now)
        if self.new_queues:
            tx.queues_changed()
        # The first row of the call with a key claims it; later rows with the same key are
        # deduplicated against that row (or against the job holding it already).
        first: dict[tuple[str, str], int] = {}
        for i, row in enumerate(self.rows):
            if row.idempotency_key:
                first.setdefault((row.queue, row.idempotency_key), i)
        claimed: set[tuple[str, str]] = set()
        holders: dict[tuple[str, str], tuple[bytes, int]] = {}
        if first:
            # In (queue, key) order: two transactions claiming overlapping keys then lock them
            # in the same order and wait for each other instead of deadlocking.
            idx = sorted(first.values(), key=lambda i: (self.rows[i].queue, self.rows[i].idempotency_key))
            got = await conn.fetch(Q["claim_keys"], [self.rows[i].queue for i in idx],
                                   [self.rows[i].idempotency_key for i in idx], [self.rows[i].id for i in idx],
                                   [self.dedup_until[i] for i in idx], now)
            claimed = {(r[0], r[1]) for r in got}
            lost = [k for k in first if k not in claimed]
            if lost:
                for q, k, job_id, state in await conn.fetch(Q["held_keys"], [k[0] for k in lost], [k[1] for k in lost]):
                    holders[(q, k)] = (job_id, 0 if state is None else state)
        dedups: Dedups = {}
        fresh: list[Record] = []
        seqs = self.seqs
        for i, row in enumerate(self.rows):
            key = row.idempotency_key
            if not key:
                fresh.append((*row, seqs[i]))
                continue
            k = (row.queue, key)
            if k in claimed and first[k] == i:
                fresh.append((*row, seqs[i]))
            elif k in claimed:
                owner = self.rows[first[k]]
                dedups[i] = (owner.id, owner.state)
            elif k in holders:
                dedups[i] = holders[k]
            else:  # claimed by a transaction that then vanished (cannot happen: the insert waited)
                raise StoreError(f"idempotency key {key!r} of queue {row.queue!r} neither claimed nor held")
        await insert(tx, fresh)
        custom = self.custom
        if custom:
            if dedups:
                gone = {self.rows[i].id for i in dedups}
                custom = [e for e in custom if e[0] not in gone]
            if custom:
                await conn.execute(Q["insert_custom"], [e[0] for e in custom], [e[1] for e in custom],
                                   [e[2] for e in custom])
        return dedups


# ---------------------------------------------------------------------- reserve

_ORDER = lambda r: (-r[2], r[3], r[12])  # noqa: E731 - priority DESC, run_at, seq


async def promote(tx: Tx, now: int, limit: int) -> list[Any]:
    """Due SCHEDULED jobs → READY (``promote_due``); one (queue, run_at) row per job."""
    rows = await tx.conn.fetch(Q["promote_due"], now, limit)
    for q in {r[0] for r in rows}:
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

    __slots__ = ("granted", "granting", "lease_id", "params", "promoted")

    def __init__(self, params: ReserveParams, lease_id: bytes, granting: Granting | None = None) -> None:
        self.params, self.lease_id, self.granting = params, lease_id, granting
        #: The queues the promotion made jobs READY in (the last run; ``Store.on_promoted``).
        self.promoted: tuple[str, ...] = ()
        #: The grant time of the last run (µs UTC): the jobs' ``started_at``.
        self.granted = params.now

    async def __call__(self, tx: Tx) -> list[tuple[str, int, list[Any]]]:
        p, conn = self.params, tx.conn
        now = p.grant_time()  # what is due; the leases read the clock again (``_lease``)
        locking = flow.lock_queues(p.flow, p.queues) if p.flow else []
        if locking:  # the flow locks ride on the promotion statement (measured: docs/decisions.md)
            woken = {r[0] for r in await flow.promote_locking(conn, now, 10_000, locking)} - {None}
            for q in woken:
                tx.wake(q)
        else:
            woken = {r[0] for r in await promote(tx, now, 10_000)}
        self.promoted = tuple(sorted(woken))
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
        rows = await conn.fetch(Q["promote_due"], self.params.grant_time(), 10_000)
        woken = sorted({r[0] for r in rows})
        self.promoted = tuple(woken)
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
                used += sum(len(r[7]) + (len(r[11].encode()) if r[11] else 0) for r in rows)  # as n in SQL
            if not rows:
                continue
            rows = sorted(rows, key=_ORDER)
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


# ---------------------------------------------------------------------- settle and extend


def _held(row: Any) -> HeldJob | None:
    return None if row is None else HeldJob._make(tuple(row)[1:])


async def _apply(tx: Tx, seq: int, lease_id: bytes, queue: str, d: Decision, wake: bool = False) -> None:
    if d.entry is None:
        status = await tx.conn.execute(Q["complete_one"], d.finished_at, d.purge_at, seq, lease_id)
    else:
        status = await tx.conn.execute(Q["settle_update"], *d[:6], d.entry, seq, lease_id)
    if _count(status) != 1:  # the row is locked (settle_lookup FOR UPDATE): cannot happen
        raise StoreError(f"settle of job seq {seq} found its lease gone")
    if d.state == _READY or wake:  # wake: a flow-limited queue got a slot back
        tx.wake(queue)


async def settle_one(tx: Tx, p: SettleParams, policy: PolicyLookup) -> SettleResult:
    """Judge (``transitions.settle``) and apply one ack or nack, the row locked meanwhile."""
    row = await tx.conn.fetchrow(Q["settle_lookup"], p.job_id)
    rand = random.uniform(-1.0, 1.0) if p.kind is SettleKind.RETRY else 0.0
    verdict = settle(_held(row), p, policy, rand)
    if isinstance(verdict, SettleResult):
        return verdict
    assert row is not None
    await _apply(tx, row[0], p.lease_id, row[1], verdict, policy(row[1]).wake_on_settle)
    return verdict.result(row[1], row[8], row[12])


class SettleEachOp:
    """Settle items one by one, in job-id order (the items of one job in request order);
    results in request order. Two calls settling overlapping jobs (a worker re-sending a
    batch whose answer it lost, from another node) so lock their rows in the same order
    and wait for each other instead of deadlocking (each deadlock cost deadlock_timeout,
    1 s, before the committer's retry)."""

    __slots__ = ("items", "policy")

    def __init__(self, items: Sequence[SettleParams], policy: PolicyLookup) -> None:
        self.items, self.policy = items, policy

    async def __call__(self, tx: Tx) -> list[SettleResult]:
        items = self.items
        results: list[SettleResult | None] = [None] * len(items)
        for i in sorted(range(len(items)), key=lambda i: items[i].job_id):  # stable: a job's items in order
            results[i] = await settle_one(tx, items[i], self.policy)
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
    one, {index: result} of ``others``."""

    __slots__ = ("acks", "default_keep", "now", "others", "policy")

    def __init__(self, acks: list[SettleParams], others: dict[int, SettleParams], now: int, default_keep: int,
                 policy: PolicyLookup) -> None:
        self.acks, self.others, self.now, self.default_keep, self.policy = acks, others, now, default_keep, policy

    async def __call__(self, tx: Tx) -> tuple[list[Any], dict[bytes, SettleResult], dict[int, SettleResult]]:
        conn, now = tx.conn, self.now
        acks = sorted(self.acks, key=_JOB_ID)
        rows = await conn.fetch(Q["ack_many"], now, self.default_keep, [p.job_id for p in acks],
                                [p.lease_id for p in acks])
        for queue in dict.fromkeys([r[1] for r in rows]):  # each queue once, in row order
            pol = self.policy(queue)
            if pol.wake_on_settle:  # a flow-limited queue got slots back
                tx.wake(queue)
            if pol.completed_retention != self.default_keep:
                await conn.execute(Q["set_purge_at"], completed_purge_at(now, pol),
                                   [r[3] for r in rows if r[1] == queue])
        refused: dict[bytes, SettleResult] = {}
        if len(rows) < len(acks):  # a row per completed ack (ids unique): some were not
            acked = {r[0] for r in rows}
            refused = {p.job_id: await settle_one(tx, p, self.policy) for p in acks if p.job_id not in acked}
        others = {i: await settle_one(tx, p, self.policy)
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
        rows = await conn.fetch(Q["ack_many"], self.now, self.default_keep, [p.job_id for p in acks],
                                [p.lease_id for p in acks])
        refused: dict[bytes, SettleResult] = {}
        if len(rows) < len(acks):
            acked = {r[0] for r in rows}
            async with conn.transaction():
                tx = Tx(conn)
                refused = {p.job_id: await settle_one(tx, p, self.policy) for p in acks if p.job_id not in acked}
                await notify_in(tx, channel, origin)
        return True, (rows, refused, {}), None


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

    __slots__ = ("clock", "expires_at", "job_id", "lease_id", "now")

    def __init__(self, job_id: bytes, lease_id: bytes, now: int, expires_at: int, clock: Clock | None = None) -> None:
        self.job_id, self.lease_id, self.now, self.expires_at, self.clock = job_id, lease_id, now, expires_at, clock

    async def __call__(self, tx: Tx) -> ExtendResult:
        row = await tx.conn.fetchrow(Q["settle_lookup"], self.job_id)
        job = _held(row)
        err = lease_error(job, self.lease_id, self.now)
        if err is not None:
            return ExtendResult(err)
        assert job is not None and row is not None
        expires_at = granted_expiry(self.now, self.expires_at, self.clock)
        await tx.conn.execute(Q["extend_lease"], expires_at, row[0])
        return ExtendResult(None, expires_at, bool(job.cancel_requested))


# ---------------------------------------------------------------------- sweeps


class PromoteOp:
    """``Store.promote_due``."""

    __slots__ = ("limit", "now")

    def __init__(self, now: int, limit: int) -> None:
        self.now, self.limit = now, limit

    async def __call__(self, tx: Tx) -> SweepResult:
        rows = await promote(tx, self.now, self.limit)
        return SweepResult(len(rows), frozenset(r[0] for r in rows), promoted_run_at=tuple(r[1] for r in rows))


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
        await conn.execute(Q["sweep_no_jit"])
        rows = await conn.fetch(Q["expired_leases"], now, self.limit)
        for r in rows:
            seq, queue, lease_id = r[0], r[1], r[10]
            expired[queue] = expired.get(queue, 0) + 1
            d = reclaim(ExpiredLease._make(tuple(r)[1:9]), now, self.policy)
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
            key = (queue, r[11], d.state)
            types[key] = types.get(key, 0) + 1
        return SweepResult(len(rows), frozenset(woke), dead, expired=expired, expired_types=types)


class PruneOp:
    """``Store.prune``: finished jobs past retention, then expired idempotency keys."""

    __slots__ = ("limit", "now")

    def __init__(self, now: int, limit: int) -> None:
        self.now, self.limit = now, limit

    async def __call__(self, tx: Tx) -> SweepResult:
        jobs = _count(await tx.conn.execute(Q["prune_jobs"], self.now, self.limit))
        keys = _count(await tx.conn.execute(Q["prune_idempotency"], self.now, self.limit))
        return SweepResult(jobs + keys)


class QueueOp:
    """``Store.upsert_queue``."""

    __slots__ = ("now", "queue")

    def __init__(self, queue: QueueRecord, now: int) -> None:
        self.queue, self.now = queue, now

    async def __call__(self, tx: Tx) -> None:
        q = self.queue
        await tx.conn.execute(Q["upsert_queue"], q.name, q.settings_json, q.paused, q.declared, self.now, self.now)
        await flow.forget(tx.conn, q.name)  # new limits: the bound of the old ones ends here
        tx.queues_changed()


class Refused:
    """What ``ChangeQueueOp`` returns when its ``change`` raised: the exception, for the
    caller (the transaction commits the rest of its group; this operation wrote nothing)."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class ChangeQueueOp:
    """``Store.change_queue``: the row read ``FOR UPDATE``, changed by ``change``, written
    back, in the transaction of the group."""

    __slots__ = ("change", "name", "now")

    def __init__(self, name: str, change: Callable[[QueueRecord | None], QueueRecord], now: int) -> None:
        self.name, self.change, self.now = name, change, now

    async def __call__(self, tx: Tx) -> QueueRecord | Refused:
        name, now = self.name, self.now
        while True:
            row = await tx.conn.fetchrow(Q["lock_queue"], name)
            stored = None if row is None else QueueRecord(row[0], row[1], bool(row[2]), bool(row[3]))
            try:
                new = self.change(stored)
            except Exception as exc:
                return Refused(exc)
            new = QueueRecord(name, new.settings_json, new.paused, new.declared)
            if stored is not None:
                await tx.conn.execute(Q["update_queue"], name, new.settings_json, new.paused, new.declared, now)
            elif not _count(await tx.conn.execute(Q["insert_queue_if_absent"], name, new.settings_json, new.paused,
                                                  new.declared, now, now)):
                continue  # another node created it since the read: change the row it made
            await flow.forget(tx.conn, name)  # new limits: the bound of the old ones ends here
            tx.queues_changed()
            return new


class ReportWorkersOp:
    """``Store.report_workers``: replace the node's worker rows, forget the old ones."""

    __slots__ = ("forget_before", "node", "workers")

    def __init__(self, node: str, workers: Sequence[WorkerRecord], forget_before: int) -> None:
        self.node = node
        self.workers = workers
        self.forget_before = forget_before

    async def __call__(self, tx: Tx) -> None:
        conn = tx.conn
        await conn.execute(Q["forget_node_workers"], self.node)
        if self.workers:
            ws = self.workers
            await conn.execute(Q["report_workers"], [w.worker_id for w in ws], [w.host for w in ws],
                               [json.dumps(list(w.queues)) for w in ws], [w.concurrency for w in ws],
                               [w.client_version for w in ws], [w.first_seen for w in ws],
                               [w.last_reserve for w in ws], [w.last_seen for w in ws],
                               [w.completed_minute for w in ws], [w.failed_minute for w in ws], self.node,
                               [w.stopped_at for w in ws])
        await conn.execute(Q["forget_old_workers"], self.forget_before)


class HeartbeatOp:
    """``Store.heartbeat``: insert or update the node's row."""

    __slots__ = ("node",)

    def __init__(self, node: NodeRecord) -> None:
        self.node = node

    async def __call__(self, tx: Tx) -> None:
        await tx.conn.execute(Q["heartbeat"], *self.node)
