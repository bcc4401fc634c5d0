"""The enqueue operations of the PostgreSQL backend, run by the committer inside a group
transaction (``committer.Tx``) or, for plain inserts folded together, as one statement
that commits by itself (``InsertOp.run_autocommit``): the inserts (one statement, or a
binary COPY for many rows), and the keyed enqueue that claims idempotency keys exactly
once across nodes (``INSERT … ON CONFLICT``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sepp.domain.records import Dedups, JobRow, QueueRecord
from sepp.domain.states import State
from sepp.storage.dependencies import CANCEL, DependsOn, Found, OnFailure, failure_reason, missing_of, packed, plan
from sepp.storage.errors import DependencyMissing, StoreError
from sepp.storage.postgres.committer import FoldableOp, Tx
from sepp.storage.postgres.sql import Q
from sepp.storage.row_types import at
from sepp.storage.search import CustomEntry

_READY = int(State.READY)
#: Positions in an insert record (``Record``: a ``JobRow``'s fields, then its seq).
_QUEUE, _STATE = at(JobRow, "queue"), at(JobRow, "state")
log = logging.getLogger("sepp.storage.postgres")


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
        if r[_STATE] == _READY:
            tx.wake(r[_QUEUE])


_COMPLETED = int(State.COMPLETED)


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
        ready = sorted({row[_QUEUE] for row in rows if row[_STATE] == _READY})
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

    __slots__ = ("custom", "dedup_until", "depends_on", "foreign", "lock_key", "new_queues", "now", "on_failure",
                 "rows", "seqs")

    def __init__(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                 new_queues: Sequence[QueueRecord], custom: Sequence[CustomEntry] = (),
                 seqs: Sequence[int] = (), foreign: Sequence[bytes] = (), depends_on: DependsOn | None = None,
                 on_failure: OnFailure | None = None) -> None:
        self.rows, self.dedup_until, self.now, self.new_queues = rows, dedup_until, now, new_queues
        self.custom = custom
        #: Row index → the ids it depends on (``storage.dependencies``).
        self.depends_on = depends_on
        #: Row index → its failure policy (``storage.dependencies``; absent: cancel).
        self.on_failure = on_failure or {}
        #: Each row's seq (``Record``).
        self.seqs = seqs
        #: The rows' foreign ids (``PostgresStore.enqueue``): refused if a row has one as
        #: its native id (``native_taken``).
        self.foreign = foreign
        #: The first (queue, key) this operation locks: the committer runs the keyed
        #: enqueues of a group in this order, so two groups claiming the same hot keys
        #: lock them in the same order and wait instead of deadlocking.
        self.lock_key = min(((r.queue, r.idempotency_key) for r in rows if r.idempotency_key), default=("", ""))

    async def __call__(self, tx: Tx) -> Dedups:
        conn, now = tx.conn, self.now
        if self.foreign:
            taken = await conn.fetch(Q["native_taken"], list(self.foreign))
            if taken:
                raise StoreError(f"PostgreSQL: duplicate job id {bytes(taken[0]['id']).hex()}: a job has it already")
        found: dict[bytes, Found] = {}
        if self.depends_on:
            found = await dependencies(conn, self.depends_on)
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
            claimed = {(queue, key) for queue, key in got}
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
        if self.depends_on:
            for i, ids in self.depends_on.items():
                if i not in dedups:
                    await defer(conn, seqs[i], ids, found, self.on_failure.get(i, CANCEL), now)
        custom = self.custom
        if custom:
            if dedups:
                gone = {self.rows[i].id for i in dedups}
                custom = [e for e in custom if e[0] not in gone]
            if custom:
                await conn.execute(Q["insert_custom"], [e[0] for e in custom], [e[1] for e in custom],
                                   [e[2] for e in custom])
        return dedups


async def defer(conn: Any, seq: int, ids: Sequence[bytes], found: dict[bytes, Found], policy: int,
                now: int) -> None:
    """Write a new job (``seq``) as waiting for ``ids`` (``found``: each one's seq and state):
    its count of unfinished dependencies and its wait rows; under ``policy`` a dependency that
    already failed cancels it at once (``now``, µs UTC; docs/workflows.md)."""
    waits, failed = plan(ids, found, policy)
    await conn.execute(Q["defer_job"], seq, len(waits), packed(ids), policy)
    if waits:
        await conn.execute(Q["insert_waits"], waits, seq)
    if failed is not None:
        dep, f = failed
        await conn.execute(Q["cancel_at_enqueue"], seq, now, f.purge_at, failure_reason(dep, f.state), f.seq)


async def dependencies(conn: Any, depends_on: DependsOn) -> dict[bytes, Found]:
    """Look up and lock the dependencies of an enqueue: {id: (seq, state, purge_at)} of each
    as of after the lock (the unfinished ones now marked ``has_dependents``). Raises
    ``DependencyMissing`` when one is no stored job. Locked in seq order, so two enqueues
    naming the same jobs wait for each other instead of deadlocking; a dependency completing
    or failing meanwhile is read after its commit."""
    ids = sorted({d for v in depends_on.values() for d in v})
    seq_of = {bytes(r[0]): r[1] for r in await conn.fetch(Q["dep_lookup"], ids)}
    missing = missing_of(depends_on, seq_of)
    if missing:
        raise DependencyMissing(missing)
    locked = {r[0]: Found(r[0], r[1], r[2]) for r in await conn.fetch(Q["mark_dependencies"], sorted(seq_of.values()))}
    return {dep: locked.get(seq, Found(seq, _COMPLETED, None)) for dep, seq in seq_of.items()}
