"""``PostgresAdmin``: the admin operations of the PostgreSQL backend
(``sepp.storage.admin.AdminStore``), with the semantics of ``sepp.storage.sqlite.admin``:
the same keyset sort keys, filters, counts and verdicts (one conformance
suite for both backends).

Reads go through the store's read pool and writes through its committer, both handed over
as ``reads.PgReads`` (driver errors as ``StoreError`` / ``StoreUnavailable``; each write one
operation of ``admin_writes``, folded into group commits). Every query is driven by
an index (admin.sql), so none slows down as the completed-job history grows:

* READY listings walk ``jobs_ready`` queue by queue in reserve order;
* SCHEDULED and RESERVED listings walk ``jobs_scheduled`` / ``jobs_leased`` (small sets),
  the retries alone (``JobQuery.retries``) ``jobs_retrying`` (migration 0011);
* COMPLETED / DEAD_LETTERED / CANCELLED listings, their counts and the bulk redrive walk
  ``jobs_finished``;
* a listing without a state walks the primary key in enqueue order.

Several nodes share the database, so every write is safe against a
reserve, settle or sweep running on another node at the same moment:

* cancel and requeue lock the row they judge (``SELECT … FOR UPDATE``) and write it under a
  guard on the state judged; a requeue wakes the queue's long-pollers on every node
  (``tx.wake``: NOTIFY at commit);
* the bulk redrive and purge take their rows through ``FOR UPDATE SKIP LOCKED`` subselects
  with a LIMIT (one chunk per call, so one request never holds a writer long): a row another
  transaction holds is left for a later chunk, never overwritten;
* ``add_counts`` adds each node's in-memory counts to the stored ones
  (``ON CONFLICT … DO UPDATE SET x = x + excluded.x``), never replaces them.

Damaged rows: see ``summaries`` (the listed rows read as ``JobSummary``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sepp.domain.params import FlowLimits
from sepp.domain.states import STATE_NAMES
from sepp.domain.transitions import BULK_REDRIVABLE, redrive
from sepp.quoting import clip
from sepp.storage import flow_keys
from sepp.storage.admin import (
    DeadFilter,
    FlowRead,
    JobPage,
    JobQuery,
    JobSummary,
    MinuteRow,
    QueueGauges,
    SortKey,
    StateCounts,
    WriteResult,
)
from sepp.storage.admin import first_position as _start
from sepp.storage.admin import position_int as _int
from sepp.storage.base import FINISHED, PolicyLookup, State
from sepp.storage.postgres import admin_writes as writes
from sepp.storage.postgres import type_figures as figures
from sepp.storage.postgres.matching import count_jobs as _count_jobs
from sepp.storage.postgres.reads import PgReads
from sepp.storage.postgres.sql import A
from sepp.storage.postgres.summaries import summary as _summary
from sepp.storage.rows import note_damaged
from sepp.storage.search import search_page
from sepp.storage.type_figures import TypeFiguresRead, TypeMinute, TypeRunBucket

if TYPE_CHECKING:
    pass


_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_FINISHED = tuple(int(s) for s in FINISHED)
_COMPLETED = int(State.COMPLETED)


def _storable(*texts: str | None) -> bool:
    """False when a text filter holds NUL, which PostgreSQL text cannot store: no stored value
    can equal (or start with) it, so the read matches nothing (as it would in SQLite) instead
    of failing with a driver error."""
    return not any(t is not None and "\x00" in t for t in texts)


class PostgresAdmin:
    """Admin operations over one ``PostgresStore`` (see ``AdminStore`` for each method's
    contract). Every method may raise ``StoreClosed`` / ``StoreError`` / ``StoreUnavailable``."""

    def __init__(self, reads: PgReads) -> None:
        self._reads = reads
        self._submit = reads.submit

    # ------------------------------------------------------------------ listings

    async def list_jobs(self, query: JobQuery, after: SortKey | None, limit: int, budget: int = 0) -> JobPage:
        """One page of jobs (see ``AdminStore.list_jobs``): sort keys ``[queue, priority,
        run_at, seq]`` (READY), ``[queue, finished_at, seq]`` (finished states), ``[run_at,
        seq]`` (SCHEDULED), ``[seq]`` (RESERVED, any state). Fetches ``limit + 1`` keys to know
        whether another page follows. Raises ``ValueError`` for a position of another order."""
        if not _storable(query.queue, query.job_type, query.reason_prefix, query.idempotency_key,
                         query.error_contains, *(t for term in query.custom for t in term)):
            return JobPage([], None)
        if query.searching:
            return await search_page(self, query, after, limit, budget)
        keys = await self.walk(query, after, limit + 1)
        more = len(keys) > limit
        keys = keys[:limit]
        summaries = await self._summaries([seq for seq, _ in keys])
        return JobPage(summaries, keys[-1][1] if more and keys else None)

    async def walk(self, query: JobQuery, after: SortKey | None, want: int) -> list[tuple[int, SortKey]]:
        """Up to ``want`` (seq, sort key) of the listing of ``query`` after ``after`` in its order
        (the indexes of the module docstring). Raises ``ValueError`` for a position of another
        order."""
        keys: list[tuple[int, SortKey]]
        if query.state == int(State.READY):
            keys = await self._list_ready(query, after, want)
        elif query.state in _FINISHED:
            keys = await self._list_finished(query, after, want)
        elif query.state == int(State.SCHEDULED):
            run_at, seq = (_int(after[0]), _int(after[-1])) if after and len(after) == 2 else _start(after, 2)
            name = "list_retrying" if query.retries else "list_scheduled"
            rows = await self._reads.fetch(A[name], run_at, seq, query.queue, query.job_type, want)
            keys = [(s, [r, s]) for s, r in rows]
        elif query.state in (int(State.RESERVED), int(State.DEFERRED)):
            seq = _int(after[0]) if after and len(after) == 1 else _start(after, 1)[0]
            name = "list_reserved" if query.state == int(State.RESERVED) else "list_deferred"
            rows = await self._reads.fetch(A[name], seq, query.queue, query.job_type, want)
            keys = [(s, [s]) for (s,) in rows]
        else:
            seq = _int(after[0]) if after and len(after) == 1 else _start(after, 1)[0]
            rows = await self._reads.fetch(A["list_any"], seq, query.queue, query.job_type, query.reason_prefix,
                                            query.finished_after, query.finished_before, want)
            keys = [(s, [s]) for (s,) in rows]
        return keys

    # ------------------------------------------------------------------ search (sepp.storage.search)

    async def walk_errors(self, query: JobQuery, after: SortKey | None, want: int,
                          folded: str) -> tuple[list[tuple[int, SortKey]], SortKey | None, int] | None:
        """``SearchBackend.walk_errors``: None, always — an error search in one state walks and
        matches by primary key (``search_match``; its cost in docs/benchmarks.md)."""
        return None

    async def by_custom(self, key: str, value: str, after_seq: int, limit: int) -> list[int]:
        """``SearchBackend.by_custom`` (``job_custom_match``)."""
        return [s for (s,) in await self._reads.fetch(A["search_by_custom"], key, value, after_seq, limit)]

    async def by_id(self, job_id: bytes, after_seq: int) -> list[int]:
        """``SearchBackend.by_id`` (the unique index on id)."""
        return [s for (s,) in await self._reads.fetch(A["search_by_id"], job_id, after_seq)]

    async def by_key(self, queue: str | None, key: str, after_seq: int, limit: int) -> list[int]:
        """``SearchBackend.by_key`` (``idempotency``'s primary key, one probe per queue)."""
        if queue is not None:
            rows = await self._reads.fetch(A["search_by_key_in_queue"], queue, key, after_seq)
        else:
            rows = await self._reads.fetch(A["search_by_key"], key, after_seq, limit)
        return [s for (s,) in rows]

    @staticmethod
    def _filters(query: JobQuery, needle: str | None) -> tuple[Any, ...]:
        """The parameters $2 … $10 of ``search_filters``."""
        return (query.queue, query.state, query.job_type, query.reason_prefix, query.finished_after,
                query.finished_before, needle, [k for k, _ in query.custom], [v for _, v in query.custom])

    async def match(self, query: JobQuery, seqs: list[int], needle: str | None) -> list[int]:
        """``SearchBackend.match`` (``search_match``: primary-key lookups of the candidates)."""
        rows = await self._reads.fetch(A["search_match"], seqs, *self._filters(query, needle))
        return [s for (s,) in rows]

    async def match_range(self, query: JobQuery, low: int, high: int, needle: str | None) -> list[int]:
        """``SearchBackend.match_range`` (``search_range``: a primary-key range)."""
        rows = await self._reads.fetch(A["search_range"], low, *self._filters(query, needle), high)
        return [s for (s,) in rows]

    async def seq_bounds(self) -> tuple[int, int] | None:
        """``SearchBackend.seq_bounds`` (the primary key's ends)."""
        row = await self._reads.fetchrow(A["seq_bounds"])
        return None if row is None or row[0] is None else (int(row[0]), int(row[1]))

    async def summaries(self, seqs: list[int]) -> list[JobSummary]:
        """``SearchBackend.summaries``."""
        return await self._summaries(seqs)

    async def _summaries(self, seqs: list[int]) -> list[JobSummary]:
        if not seqs:
            return []
        rows = await self._reads.fetch(A["job_summaries"], seqs)
        by_seq = {row[0]: _summary(row) for row in rows}
        # A job deleted between the two reads is simply left out.
        return [by_seq[s] for s in seqs if s in by_seq]

    async def _queues_from(self, query: JobQuery, after: SortKey | None, first: str,
                           *args: Any) -> tuple[str | None, SortKey | None]:
        """The queue a per-queue walk starts in and the position inside it (``first`` finds
        the first queue of a walk over every queue: ``args`` then the queue to start after)."""
        if after is not None:
            if not after or not isinstance(after[0], str) or not _storable(after[0]):
                raise ValueError("malformed page position")
            if query.queue is not None and after[0] != query.queue:
                raise ValueError("page position belongs to another queue")
            return after[0], after[1:]
        if query.queue is not None:
            return query.queue, None
        return await self._reads.fetchval(A[first], *args, ""), None

    async def _list_ready(self, query: JobQuery, after: SortKey | None, want: int) -> list[tuple[int, SortKey]]:
        queue, pos = await self._queues_from(query, after, "next_ready_queue")
        fetch = self._reads.fetch
        out: list[tuple[int, SortKey]] = []
        while queue is not None and len(out) < want:
            rows: list[Any] = []
            priority = 10
            if pos:
                if len(pos) != 3:
                    raise ValueError("malformed page position")
                priority, run_at, seq = _int(pos[0]), _int(pos[1]), _int(pos[2])
                rows = list(await fetch(A["list_ready"], queue, priority, run_at, seq, query.job_type,
                                        want - len(out)))
            if len(rows) < want - len(out):
                rows += await fetch(A["list_ready_lower"], queue, priority, query.job_type,
                                    want - len(out) - len(rows))
            out.extend((s, [queue, p, r, s]) for s, p, r in rows)
            if query.queue is not None:
                break
            queue, pos = await self._reads.fetchval(A["next_ready_queue"], queue), None
        return out

    async def _list_finished(self, query: JobQuery, after: SortKey | None,
                             want: int) -> list[tuple[int, SortKey]]:
        state = query.state
        queue, pos = await self._queues_from(query, after, "next_finished_queue", state)
        low = _INT_MIN if query.finished_after is None else query.finished_after
        high = _INT_MAX if query.finished_before is None else query.finished_before
        out: list[tuple[int, SortKey]] = []
        while queue is not None and len(out) < want:
            finished_at, seq = _INT_MAX, _INT_MAX
            if pos:
                if len(pos) != 2:
                    raise ValueError("malformed page position")
                finished_at, seq = _int(pos[0]), _int(pos[1])
            rows = await self._reads.fetch(A["list_finished"], state, queue, low, high, finished_at, seq,
                                            query.job_type, query.reason_prefix, want - len(out))
            out.extend((s, [queue, f, s]) for s, f in rows)
            if query.queue is not None:
                break
            queue, pos = await self._reads.fetchval(A["next_finished_queue"], state, queue), None
        return out

    # ------------------------------------------------------------------ stats

    async def state_counts(self, queue: str | None) -> dict[str, StateCounts]:
        """Counts per state of the whole cluster's jobs: one queue through its index ranges,
        or every queue with jobs at once (a queue without jobs is left out)."""
        if queue is not None:
            if not _storable(queue):
                return {queue: StateCounts()}
            row = await self._reads.fetchrow(A["count_queue"], queue)
            return {queue: StateCounts(*(int(n) for n in row))} if row is not None else {queue: StateCounts()}
        acc: dict[str, dict[str, int]] = {}
        for name, state in (("count_scheduled_all", 1), ("count_ready_all", 2), ("count_reserved_all", 3)):
            for q, n in await self._reads.fetch(A[name]):
                acc.setdefault(q, {})[STATE_NAMES[state]] = int(n)
        for q, state, n in await self._reads.fetch(A["count_finished_all"]):
            field = STATE_NAMES.get(state)
            if field is None:
                # A state no sepp writes: left out of the counts, logged once per state and
                # queue (the job lists with state "unknown").
                note_damaged(f"state {state!r} {q}",
                             f"queue {q!r}: {n} job(s) with unknown state {clip(repr(state), 40)} left out of "
                             "the state counts")
                continue
            acc.setdefault(q, {})[field] = int(n)
        return {q: StateCounts(**fields) for q, fields in acc.items()}

    async def oldest_ready(self, queue: str) -> int | None:
        """min(run_at) (µs) of the queue's READY jobs (one index seek per priority), or None."""
        if not _storable(queue):
            return None
        value = await self._reads.fetchval(A["oldest_ready"], queue)
        return None if value is None else int(value)

    async def oldest_deferred(self, queues: Sequence[str]) -> dict[str, int]:
        """See ``AdminStore.oldest_deferred`` (``jobs_finished``: DEFERRED rows, finished_at
        NULL, in seq order within a queue)."""
        names = sorted(q for q in queues if _storable(q))
        if not names:
            return {}
        return {q: int(at) for q, at in await self._reads.fetch(A["oldest_deferred_all"], names) if at is not None}

    async def waiting_on(self, seq: int) -> list[bytes]:
        """See ``AdminStore.waiting_on`` (``job_waits_child``)."""
        return [bytes(r[0]) for r in await self._reads.fetch(A["waiting_on"], seq)]

    async def reserved_by_worker(self) -> dict[str, int]:
        """See ``AdminStore.reserved_by_worker`` (the ``jobs_leased`` partial index holds only
        RESERVED rows)."""
        rows = await self._reads.fetch(A["count_reserved_by_worker"])
        return {("" if w is None else str(w)): int(n) for w, n in rows}

    async def queue_gauges(self) -> QueueGauges:
        """``AdminStore.queue_gauges`` for the whole cluster: ``state_counts(None)`` and one
        index seek per queue and priority for the oldest READY job."""
        counts = await self.state_counts(None)
        names = sorted(q for q, c in counts.items() if c.ready)
        oldest = {q: int(run_at) for q, run_at in await self._reads.fetch(A["oldest_ready_all"], names)
                  if run_at is not None}
        deferred = await self.oldest_deferred([q for q, c in counts.items() if c.deferred])
        return QueueGauges(counts, oldest, oldest_deferred=deferred)

    async def flow_read(self, queue: str, limits: FlowLimits) -> FlowRead:
        """``AdminStore.flow_read``: the bucket row, and for a per-key limit the extras of the
        RESERVED jobs (``jobs_leased``) and of the first ``KEY_SCAN`` READY jobs in reserve
        order (``jobs_ready``), on the read pool without the queue's flow lock (a view: a
        reserve in progress may move a few jobs meanwhile)."""
        if not _storable(queue):
            return FlowRead()
        bucket = None
        if limits.rate_amount:
            row = await self._reads.fetchrow(A["flow_bucket"], queue)
            bucket = None if row is None else (float(row[0]), int(row[1]))
        if not limits.per_key:
            return FlowRead(bucket)
        held = [r[0] for r in await self._reads.fetch(A["flow_reserved_extras"], queue)]
        ready = await self._reads.fetch(A["flow_ready_keys"], queue, flow_keys.KEY_SCAN)
        allowed, scanned = flow_keys.key_room(limits.key, limits.max_per_key, held,
                                              ((r[0], r[1]) for r in ready))
        return FlowRead(bucket, allowed, scanned)

    async def throughput(self, since_minute: int) -> list[MinuteRow]:
        """Throughput rows of every queue from ``since_minute`` (µs // 60,000,000) on: the sums
        every node added."""
        rows = await self._reads.fetch(A["throughput_since"], since_minute)
        return [MinuteRow(q, int(m), int(e), int(c), int(d)) for q, m, e, c, d in rows]

    async def add_counts(self, counts: Mapping[tuple[str, int], tuple[int, int, int]],
                         keep_after_minute: int) -> None:
        """Add this node's in-memory counts {(queue, minute): (enqueued, completed,
        dead_lettered)} to the stored ones (every node adds its own) and drop the rows older
        than ``keep_after_minute``, in one commit."""
        rows = sorted((q, m, *v) for (q, m), v in counts.items() if _storable(q))
        columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] if rows else []
        await self._submit(partial(writes.add_counts, columns, keep_after_minute), 0)

    async def count_jobs(self, query: JobQuery) -> int:
        """See ``AdminStore.count_jobs`` (``sepp.storage.postgres.matching``)."""
        return await _count_jobs(self._reads, query)

    async def add_type_figures(self, minutes: Sequence[TypeMinute], buckets: Sequence[TypeRunBucket],
                               keep_minutes_after: int, keep_hours_after: int) -> None:
        """See ``AdminStore.add_type_figures``: this node's counts added to every node's
        (``sepp.storage.postgres.type_figures``)."""
        await figures.add_type_figures(self._reads, minutes, buckets, keep_minutes_after, keep_hours_after)

    async def type_figures(self, queue: str, day_minute: int, hour_minute: int) -> TypeFiguresRead:
        """See ``AdminStore.type_figures``: the whole cluster's figures."""
        return await figures.type_figures(self._reads, queue, day_minute, hour_minute)

    # ------------------------------------------------------------------ single jobs

    async def find_idempotency(self, queue: str, key: str) -> tuple[bytes, int] | None:
        """(job id, expires_at µs) of a claimed key, expired or not; None when unclaimed."""
        if not _storable(queue, key):
            return None
        row = await self._reads.fetchrow(A["find_key"], queue, key)
        return None if row is None else (bytes(row[0]), int(row[1]))

    async def cancel(self, job_id: bytes, now: int, policy: PolicyLookup, reason: str) -> WriteResult:
        """Apply ``transitions.cancel`` to the job, locked while judged (see
        ``AdminStore.cancel``): SCHEDULED/READY/DEFERRED → CANCELLED (``DONE``), RESERVED → the cancel
        request flag (``CANCEL_REQUESTED``), CANCELLED → ``UNCHANGED``, else ``WRONG_STATE``;
        ``NOT_FOUND`` for no such job."""
        result: WriteResult = await self._submit(partial(writes.cancel_job, job_id, now, policy, reason), 0)
        return result

    async def requeue(self, job_id: bytes, now: int, revive_dependents: bool = True) -> WriteResult:
        """Apply ``transitions.redrive`` (DEAD_LETTERED/CANCELLED → READY at ``now``, attempt
        0, history kept) to the job, locked while judged; wakes the queue's long-pollers on
        every node. ``WRONG_STATE`` for another state, ``NOT_FOUND`` for no such job."""
        result: WriteResult = await self._submit(partial(writes.requeue_job, job_id, now, revive_dependents), 0)
        return result

    async def delete_job(self, job_id: bytes, state: int | None = None) -> WriteResult:
        """Delete one job in any state (``DONE`` with its queue and the state it had), or
        ``NOT_FOUND``; with ``state`` only while it is in that state (``WRONG_STATE``
        otherwise: ``AdminStore.delete_job``). One statement: a concurrent writer of the row
        is waited for, and the state is judged on the row it left."""
        result: WriteResult = await self._submit(partial(writes.delete_job, job_id, state), 0)
        return result

    # ------------------------------------------------------------------ bulk

    @staticmethod
    def _dead_args(where: DeadFilter) -> list[Any]:
        """(after, before, job_type, reason prefix) of a dead-letter filter, bounds filled in."""
        return [_INT_MIN if where.after is None else where.after, _INT_MAX if where.before is None else where.before,
                where.job_type, where.reason_prefix]

    async def count_dead(self, where: DeadFilter) -> int:
        """How many DEAD_LETTERED jobs match ``where`` (dead-letter time in [after, before))."""
        if not _storable(where.queue, where.job_type, where.reason_prefix):
            return 0
        if where.queue is None:
            value = await self._reads.fetchval(A["count_dead_all"], *self._dead_args(where))
        else:
            value = await self._reads.fetchval(A["count_dead_queue"], where.queue, *self._dead_args(where))
        return int(value or 0)

    async def requeue_dead(self, where: DeadFilter, now: int, limit: int,
                           revive_dependents: bool = True) -> list[tuple[bytes, str, str]]:
        """One chunk of a bulk redrive: up to ``limit`` matching DEAD_LETTERED jobs (oldest
        dead letters first within a queue) get ``transitions.redrive``'s columns in one
        commit; rows another transaction holds are skipped (left for the next chunk). Returns
        (job id, queue, job type) of each job requeued; their queues' long-pollers are woken."""
        if not _storable(where.queue, where.job_type, where.reason_prefix):
            return []
        decision = redrive(int(BULK_REDRIVABLE), now)
        assert decision is not None  # DEAD_LETTERED is redrivable
        cols = [decision.state, decision.attempt, decision.run_at]
        if where.queue is None:
            sql, args = A["requeue_dead_all"], [*cols, *self._dead_args(where), limit]
        else:
            sql, args = A["requeue_dead_queue"], [*cols, where.queue, *self._dead_args(where), limit]
        result: list[tuple[bytes, str, str]] = await self._submit(
            partial(writes.requeue_dead, decision, sql, args, revive_dependents), 0)
        return result

    async def purge(self, queue: str, states: Sequence[int], limit: int) -> int:
        """Delete up to ``limit`` of the queue's jobs in ``states`` (in that order) in one
        commit; rows another transaction holds are skipped. Returns how many were deleted."""
        if not _storable(queue):
            return 0
        deleted: int = await self._submit(partial(writes.purge, queue, tuple(states), limit), 0)
        return deleted

    async def delete_queue(self, queue: str) -> bool:
        """Delete the queue row and its throughput rows if the queue holds no job (the row
        locked while judged); False otherwise."""
        if not _storable(queue):
            return True
        done: bool = await self._submit(partial(writes.delete_queue, queue), 0)
        return done
