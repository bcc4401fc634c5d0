"""``SQLiteAdmin``: the admin operations of the SQLite backend (``sepp.storage.admin.AdminStore``).

Reads go through the store's reader threads, writes through its writer, both handed over
as ``reads.SQLiteReads`` (each write one function of ``admin_writes`` in a transaction,
folded into group commits like every other write). Every query
is driven by an index, so none of them slows down as the completed-job history grows:

* READY listings walk ``jobs_ready`` queue by queue in reserve order;
* SCHEDULED and RESERVED listings walk ``jobs_scheduled`` / ``jobs_leased`` (small sets),
  the retries alone (``JobQuery.retries``) ``jobs_retrying`` (migration 0011);
* COMPLETED / DEAD_LETTERED / CANCELLED listings, their counts and the bulk redrive
  walk ``jobs_finished`` (migration 0002, partial: never touched by an insert);
* a listing without a state walks the table in enqueue order.

Bulk writes (purge, redrive) run in chunks so one request never holds the single
writer for long.
"""

from __future__ import annotations

import json
import sqlite3
from collections import namedtuple
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from sepp.domain.params import FlowLimits
from sepp.domain.states import STATE_NAMES
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
from sepp.storage.admin import count_or_zero as _count
from sepp.storage.admin import first_position as _start
from sepp.storage.admin import position_int as _int
from sepp.storage.base import FINISHED, JobRecord, PolicyLookup, State
from sepp.storage.rows import as_text, lenient_text, note_damaged, repair_job
from sepp.storage.search import search_page
from sepp.storage.sqlite import admin_writes as writes
from sepp.storage.sqlite import type_figures as figures
from sepp.storage.sqlite.matching import count_jobs as _count_jobs
from sepp.storage.sqlite.reads import SQLiteReads
from sepp.storage.sqlite.sql import A
from sepp.storage.type_figures import TypeFiguresRead, TypeMinute, TypeRunBucket

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_FINISHED = tuple(int(s) for s in FINISHED)


class SummaryRow(namedtuple("SummaryRow", "seq id queue job_type state priority run_at enqueued_at attempt "
                                          "max_attempts size encoding extras idempotency_key lease_id "
                                          "lease_expires_at worker_id started_at finished_at reason "
                                          "cancel_requested recorded last_error node")):
    """A row of ``job_summaries``: a listed job without its payload (``size``: its bytes),
    with the attempts its history records and its last error, derived in SQL."""

    __slots__ = ()


def _summary(found: Sequence[Any]) -> JobSummary:
    """A ``job_summaries`` row as a ``JobSummary``: a damaged field reads as unset or clamped
    (``repair_job``, logged once per job), so one such row never fails the page it is on."""
    row = SummaryRow._make(found)
    record = JobRecord(row.id, row.queue, row.job_type, row.state, row.priority, row.run_at, row.enqueued_at,
                       row.attempt, row.max_attempts, b"", row.encoding, row.extras, row.idempotency_key,
                       row.lease_id, row.lease_expires_at, row.worker_id, row.started_at, None, row.finished_at,
                       row.reason, row.cancel_requested, row.seq, row.node)
    fixed = repair_job(record)
    return JobSummary(fixed._replace(cancel_requested=bool(fixed.cancel_requested)),
                      _count(row.size), _count(row.recorded), as_text(row.last_error, "") or "")


def _name(queue: str | bytes) -> str:
    """A queue name of a walk as text (stored bytes that are not UTF-8 with U+FFFD)."""
    return queue if isinstance(queue, str) else lenient_text(queue)


#: Runs a write ``op`` in the writer's next transaction and wakes the long polls of the queues
#: its releases made jobs READY in, after the commit; ``weight`` as ``Committer.submit``.
WokenWrite = Callable[[Callable[[sqlite3.Connection], Any], int], Awaitable[Any]]


class SQLiteAdmin:
    """Admin operations over one ``SQLiteStore``'s reader threads and writer (``reads``; see
    ``AdminStore`` for each method's contract)."""

    def __init__(self, reads: SQLiteReads, woken: WokenWrite) -> None:
        self._reads = reads
        self._submit = reads.submit
        # Writes that can make dependents READY (a cancel's "run" dependents, a redrive's
        # revived ones) go through ``woken``: the store wakes those queues' long polls after
        # the commit (``SQLiteStore._woken``), as a settle's releases do.
        self._woken = woken

    async def _read(self, name: str, params: Any = (), one: bool = False) -> Any:
        """Run the named query on a reader thread; ``params`` is a sequence or a mapping."""
        return await self._reads.read(A[name], params, one)

    # ------------------------------------------------------------------ listings

    async def list_jobs(self, query: JobQuery, after: SortKey | None, limit: int, budget: int = 0) -> JobPage:
        """One page of jobs (see ``AdminStore.list_jobs``); fetches ``limit + 1`` keys to
        know whether another page follows. A search (``JobQuery.searching``) is answered by
        ``sepp.storage.search.search_page`` over this store's drivers."""
        if query.searching:
            return await search_page(self, query, after, limit, budget)
        keys = await self.walk(query, after, limit + 1)
        more = len(keys) > limit
        keys = keys[:limit]
        summaries = await self._summaries([seq for seq, _ in keys])
        return JobPage(summaries, keys[-1][1] if more and keys else None)

    async def walk(self, query: JobQuery, after: SortKey | None, want: int) -> list[tuple[int, SortKey]]:
        """Up to ``want`` (seq, sort key) of the listing of ``query`` after ``after``, in its
        order (the indexes of the module docstring). Raises ``ValueError`` for a position
        of another order."""
        base = {"job_type": query.job_type, "reason": query.reason_prefix}
        keys: list[tuple[int, SortKey]]
        if query.state == int(State.READY):
            keys = await self._list_ready(query, after, want, base)
        elif query.state in _FINISHED:
            keys = await self._list_finished(query, after, want, base)
        elif query.state == int(State.SCHEDULED):
            run_at, seq = (_int(after[0]), _int(after[-1])) if after and len(after) == 2 else _start(after, 2)
            name = "list_retrying" if query.retries else "list_scheduled"
            rows = await self._read(name, {**base, "queue": query.queue, "run_at": run_at, "seq": seq,
                                           "limit": want})
            keys = [(s, [r, s]) for s, r in rows]
        elif query.state in (int(State.RESERVED), int(State.DEFERRED)):
            seq = _int(after[0]) if after and len(after) == 1 else _start(after, 1)[0]
            name = "list_reserved" if query.state == int(State.RESERVED) else "list_deferred"
            rows = await self._read(name, {"job_type": query.job_type, "queue": query.queue, "seq": seq,
                                           "limit": want})
            keys = [(s, [s]) for (s,) in rows]
        else:
            seq = _int(after[0]) if after and len(after) == 1 else _start(after, 1)[0]
            rows = await self._read("list_any", {**base, "queue": query.queue, "seq": seq, "limit": want,
                                                 "after": query.finished_after, "before": query.finished_before})
            keys = [(s, [s]) for (s,) in rows]
        return keys

    # ------------------------------------------------------------------ search (sepp.storage.search)

    async def by_custom(self, key: str, value: str, after_seq: int, limit: int) -> list[int]:
        """``SearchBackend.by_custom`` (``job_custom_match``)."""
        rows = await self._read("search_by_custom", {"key": key, "value": value, "seq": after_seq, "limit": limit})
        return [s for (s,) in rows]

    async def by_id(self, job_id: bytes, after_seq: int) -> list[int]:
        """``SearchBackend.by_id`` (``UNIQUE(id)``)."""
        return [s for (s,) in await self._read("search_by_id", {"id": job_id, "seq": after_seq})]

    async def by_key(self, queue: str | None, key: str, after_seq: int, limit: int) -> list[int]:
        """``SearchBackend.by_key`` (``idempotency``'s primary key, one probe per queue)."""
        if queue is not None:
            rows = await self._read("search_by_key_in_queue", {"queue": queue, "key": key, "seq": after_seq})
        else:
            rows = await self._read("search_by_key", {"key": key, "seq": after_seq, "limit": limit})
        return [s for (s,) in rows]

    @staticmethod
    def _filters(query: JobQuery, needle: str | None) -> dict[str, Any]:
        """The parameters of ``search_filters``."""
        return {"queue": query.queue, "state": query.state, "job_type": query.job_type,
                "reason": query.reason_prefix, "after": query.finished_after, "before": query.finished_before,
                "needle": needle, "terms": len(query.custom), "custom": json.dumps(query.custom)}

    async def match(self, query: JobQuery, seqs: list[int], needle: str | None) -> list[int]:
        """``SearchBackend.match`` (``search_match``: rowid lookups of the candidates)."""
        rows = await self._read("search_match", {"seqs": json.dumps(seqs), **self._filters(query, needle)})
        return [s for (s,) in rows]

    async def match_range(self, query: JobQuery, low: int, high: int, needle: str | None) -> list[int]:
        """``SearchBackend.match_range`` (``search_range``: a rowid range)."""
        rows = await self._read("search_range", {"low": low, "high": high, **self._filters(query, needle)})
        return [s for (s,) in rows]

    async def seq_bounds(self) -> tuple[int, int] | None:
        """``SearchBackend.seq_bounds`` (the rowid's ends)."""
        row = await self._read("seq_bounds", one=True)
        return None if row is None or row[0] is None else (int(row[0]), int(row[1]))

    async def summaries(self, seqs: list[int]) -> list[JobSummary]:
        """``SearchBackend.summaries``."""
        return await self._summaries(seqs)

    async def _summaries(self, seqs: list[int]) -> list[JobSummary]:
        if not seqs:
            return []
        rows = await self._read("job_summaries", {"seqs": json.dumps(seqs)})
        by_seq = {row[0]: _summary(row) for row in rows}
        # A job deleted between the two reads is simply left out.
        return [by_seq[s] for s in seqs if s in by_seq]

    async def _queues_from(self, query: JobQuery, after: SortKey | None, next_name: str,
                           extra: Mapping[str, Any]) -> tuple[str | bytes | None, SortKey | None]:
        """The queue a per-queue walk starts in (a name, or the stored bytes of one the walk
        found: ``next_ready_queue``), and the position inside it."""
        if after is not None:
            if not after or not isinstance(after[0], str):
                raise ValueError("malformed page position")
            if query.queue is not None and after[0] != query.queue:
                raise ValueError("page position belongs to another queue")
            return after[0], after[1:]
        if query.queue is not None:
            return query.queue, None
        row = await self._read(next_name, {**extra, "queue": ""}, one=True)
        return (row[0] if row else None), None

    async def _list_ready(self, query: JobQuery, after: SortKey | None, want: int,
                          base: Mapping[str, Any]) -> list[tuple[int, SortKey]]:
        queue, pos = await self._queues_from(query, after, "next_ready_queue", {})
        out: list[tuple[int, SortKey]] = []
        while queue is not None and len(out) < want:
            rows: list[tuple[int, int, int]] = []
            priority = 10
            if pos:
                if len(pos) != 3:
                    raise ValueError("malformed page position")
                priority, run_at, seq = _int(pos[0]), _int(pos[1]), _int(pos[2])
                rows = await self._read("list_ready", {**base, "queue": queue, "priority": priority,
                                                       "run_at": run_at, "seq": seq, "limit": want - len(out)})
            if len(rows) < want - len(out):
                rows += await self._read("list_ready_lower", {**base, "queue": queue, "priority": priority,
                                                              "limit": want - len(out) - len(rows)})
            name = _name(queue)
            out.extend((s, [name, p, r, s]) for s, p, r in rows)
            if query.queue is not None:
                break
            row = await self._read("next_ready_queue", {"queue": queue}, one=True)
            queue, pos = (row[0] if row else None), None
        return out

    async def _list_finished(self, query: JobQuery, after: SortKey | None, want: int,
                             base: Mapping[str, Any]) -> list[tuple[int, SortKey]]:
        state = query.state
        queue, pos = await self._queues_from(query, after, "next_finished_queue", {"state": state})
        bounds = self._finished_bounds(query)
        out: list[tuple[int, SortKey]] = []
        while queue is not None and len(out) < want:
            finished_at, seq = self._finished_position(pos)
            rows = await self._read("list_finished", {**base, **bounds, "state": state, "queue": queue,
                                                      "finished_at": finished_at, "seq": seq,
                                                      "limit": want - len(out)})
            name = _name(queue)
            out.extend((s, [name, f, s]) for s, f in rows)
            if query.queue is not None:
                break
            row = await self._read("next_finished_queue", {"state": state, "queue": queue}, one=True)
            queue, pos = (row[0] if row else None), None
        return out

    @staticmethod
    def _finished_bounds(query: JobQuery) -> dict[str, int]:
        return {"after": _INT_MIN if query.finished_after is None else query.finished_after,
                "before": _INT_MAX if query.finished_before is None else query.finished_before}

    @staticmethod
    def _finished_position(pos: SortKey | None) -> tuple[int, int]:
        """(finished_at, seq) of a position inside one queue's finished walk (the start: the
        largest). Raises ``ValueError`` for a malformed one."""
        if not pos:
            return _INT_MAX, _INT_MAX
        if len(pos) != 2:
            raise ValueError("malformed page position")
        return _int(pos[0]), _int(pos[1])

    async def walk_errors(self, query: JobQuery, after: SortKey | None, want: int,
                          folded: str) -> tuple[list[tuple[int, SortKey]], SortKey | None, int] | None:
        """``SearchBackend.walk_errors``: for DEAD_LETTERED and CANCELLED, the walk of
        ``list_failed_errors`` (``jobs_failed``, migration 0009) queue by queue as
        ``_list_finished`` walks; None for any other state."""
        state = query.state
        if state not in (int(State.DEAD_LETTERED), int(State.CANCELLED)):
            return None
        queue, pos = await self._queues_from(query, after, "next_finished_queue", {"state": state})
        bounds = self._finished_bounds(query)
        hits: list[tuple[int, SortKey]] = []
        position, examined = after, 0
        while queue is not None and examined < want:
            finished_at, seq = self._finished_position(pos)
            rows = await self._read("list_failed_errors", {**bounds, "folded": folded, "state": state, "queue": queue,
                                                           "finished_at": finished_at, "seq": seq,
                                                           "limit": want - examined})
            name = _name(queue)
            found = sorted(((f, s) for s, f, hit, _ in rows if hit), reverse=True)
            hits.extend((s, [name, f, s]) for f, s in found)
            tail = [(s, f, n) for s, f, hit, n in rows if not hit]
            if tail:
                s, f, n = tail[-1]
                position, examined = [name, f, s], examined + int(n)
                if examined >= want:  # the round's budget is spent inside this queue
                    break
            if query.queue is not None:
                break
            row = await self._read("next_finished_queue", {"state": state, "queue": queue}, one=True)
            queue, pos = (row[0] if row else None), None
        return hits, position, examined

    # ------------------------------------------------------------------ stats

    async def state_counts(self, queue: str | None) -> dict[str, StateCounts]:
        """Counts per state; one queue through its index ranges, or every queue at once."""
        if queue is not None:
            row = await self._read("count_queue", {"queue": queue}, one=True)
            return {queue: StateCounts(*row)}
        acc: dict[str, dict[str, int]] = {}
        for name, state in (("count_scheduled_all", 1), ("count_ready_all", 2), ("count_reserved_all", 3)):
            for q, n in await self._read(name):
                acc.setdefault(q, {})[STATE_NAMES[state]] = n
        for q, state, n in await self._read("count_finished_all"):
            field = STATE_NAMES.get(state) if isinstance(state, int) else None
            if field is None:
                # A state no sepp writes (a damaged row): left out of the counts, logged once
                # per state and queue (the job lists with state "unknown").
                note_damaged(f"state {state!r} {q}",
                             f"queue {q!r}: {n} job(s) with unknown state {clip(repr(state), 40)} left out of "
                             "the state counts")
                continue
            acc.setdefault(q, {})[field] = n
        return {q: StateCounts(**fields) for q, fields in acc.items()}

    async def oldest_ready(self, queue: str) -> int | None:
        """min(run_at) of the queue's READY jobs (one index seek per priority)."""
        row = await self._read("oldest_ready", {"queue": queue}, one=True)
        return None if row is None or row[0] is None else int(row[0])

    async def oldest_deferred(self, queues: Sequence[str]) -> dict[str, int]:
        """See ``AdminStore.oldest_deferred`` (``jobs_finished``: DEFERRED rows, finished_at
        NULL, in seq order within a queue)."""
        if not queues:
            return {}
        rows = await self._read("oldest_deferred_all", {"names": json.dumps(sorted(queues))})
        return {q: int(at) for q, at in rows if isinstance(at, int)}

    async def waiting_on(self, seq: int) -> list[bytes]:
        """See ``AdminStore.waiting_on`` (``job_waits_child``)."""
        return [bytes(r[0]) for r in await self._read("waiting_on", {"seq": seq})]

    async def reserved_by_worker(self) -> dict[str, int]:
        """See ``AdminStore.reserved_by_worker`` (through the ``jobs_leased`` index: only
        RESERVED rows are read)."""
        return {("" if w is None else str(w)): int(n) for w, n in await self._read("count_reserved_by_worker")}

    async def queue_gauges(self) -> QueueGauges:
        """``AdminStore.queue_gauges``: ``state_counts(None)`` and one index seek per queue and
        priority for the oldest READY job (reader threads, off the event loop)."""
        counts = await self.state_counts(None)
        names = json.dumps(sorted(q for q, c in counts.items() if c.ready))
        oldest = {q: int(run_at) for q, run_at in await self._read("oldest_ready_all", {"names": names})
                  if isinstance(run_at, int)}
        deferred = await self.oldest_deferred([q for q, c in counts.items() if c.deferred])
        return QueueGauges(counts, oldest, oldest_deferred=deferred)

    async def flow_read(self, queue: str, limits: FlowLimits) -> FlowRead:
        """``AdminStore.flow_read``: the bucket row, and for a per-key limit the extras of the
        RESERVED jobs (``jobs_leased``) and of the first ``KEY_SCAN`` READY jobs in reserve
        order (``jobs_ready``), on the reader threads."""
        bucket = None
        if limits.rate_amount:
            row = await self._read("flow_bucket", {"queue": queue}, one=True)
            bucket = None if row is None else (float(row[0]), int(row[1]))
        if not limits.per_key:
            return FlowRead(bucket)
        held = [r[0] for r in await self._read("flow_reserved_extras", {"queue": queue})]
        ready = await self._read("flow_ready_keys", {"queue": queue, "limit": flow_keys.KEY_SCAN})
        allowed, scanned = flow_keys.key_room(limits.key, limits.max_per_key, held,
                                              ((r[0], r[1]) for r in ready))
        return FlowRead(bucket, allowed, scanned)

    async def throughput(self, since_minute: int) -> list[MinuteRow]:
        """Throughput rows from ``since_minute`` on."""
        rows = await self._read("throughput_since", {"minute": since_minute})
        return [MinuteRow(*row) for row in rows]

    async def add_counts(self, counts: Mapping[tuple[str, int], tuple[int, int, int]],
                         keep_after_minute: int) -> None:
        """Fold in-memory throughput counts into ``queue_throughput`` and prune old minutes."""
        rows = [(queue, minute, *values) for (queue, minute), values in counts.items()]

        await self._submit(partial(writes.add_counts, rows, keep_after_minute))

    async def count_jobs(self, query: JobQuery) -> int:
        """See ``AdminStore.count_jobs`` (``sepp.storage.sqlite.matching``)."""
        return await _count_jobs(self._reads, query)

    async def add_type_figures(self, minutes: Sequence[TypeMinute], buckets: Sequence[TypeRunBucket],
                               keep_minutes_after: int, keep_hours_after: int) -> None:
        """See ``AdminStore.add_type_figures`` (``sepp.storage.sqlite.type_figures``)."""
        await figures.add_type_figures(self._reads, minutes, buckets, keep_minutes_after, keep_hours_after)

    async def type_figures(self, queue: str, day_minute: int, hour_minute: int) -> TypeFiguresRead:
        """See ``AdminStore.type_figures``."""
        return await figures.type_figures(self._reads, queue, day_minute, hour_minute)

    # ------------------------------------------------------------------ single jobs

    async def find_idempotency(self, queue: str, key: str) -> tuple[bytes, int] | None:
        """(job id, expires_at) of a claimed key."""
        row = await self._read("find_key", (queue, key), one=True)
        return None if row is None else (bytes(row[0]), int(row[1]))

    async def cancel(self, job_id: bytes, now: int, policy: PolicyLookup, reason: str) -> WriteResult:
        """See ``AdminStore.cancel``."""

        result: WriteResult = await self._woken(partial(writes.cancel_job, job_id, now, policy, reason), 1)
        return result

    async def requeue(self, job_id: bytes, now: int, revive_dependents: bool = True) -> WriteResult:
        """See ``AdminStore.requeue``."""

        result: WriteResult = await self._woken(partial(writes.requeue_job, job_id, now,
                                                        revive_dependents=revive_dependents), 1)
        return result

    async def delete_job(self, job_id: bytes, state: int | None = None) -> WriteResult:
        """See ``AdminStore.delete_job``."""

        result: WriteResult = await self._submit(partial(writes.delete_job, job_id, state))
        return result

    # ------------------------------------------------------------------ bulk

    @staticmethod
    def _dead_params(where: DeadFilter) -> dict[str, Any]:
        return {"queue": where.queue, "job_type": where.job_type, "reason": where.reason_prefix,
                "after": _INT_MIN if where.after is None else where.after,
                "before": _INT_MAX if where.before is None else where.before}

    async def count_dead(self, where: DeadFilter) -> int:
        """Matching DEAD_LETTERED jobs."""
        params = self._dead_params(where)
        name = "count_dead_all" if where.queue is None else "count_dead_queue"
        if where.queue is None:
            del params["queue"]
        row = await self._read(name, params, one=True)
        return int(row[0])

    async def requeue_dead(self, where: DeadFilter, now: int, limit: int,
                           revive_dependents: bool = True) -> list[tuple[bytes, str, str]]:
        """One chunk of a bulk redrive (oldest dead letters first within a queue): (job id,
        queue, job type) of each job requeued."""
        params = {**self._dead_params(where), "now": now, "limit": limit}
        name = "requeue_dead_all" if where.queue is None else "requeue_dead_queue"
        if where.queue is None:
            del params["queue"]

        result: list[tuple[bytes, str, str]] = await self._woken(
            partial(writes.requeue_dead, name, params, revive_dependents=revive_dependents), 1)
        return result

    async def purge(self, queue: str, states: Sequence[int], limit: int) -> int:
        """Delete up to ``limit`` of the queue's jobs in ``states`` (one commit)."""

        deleted: int = await self._submit(partial(writes.purge, queue, tuple(states), limit))
        return deleted

    async def delete_queue(self, queue: str) -> bool:
        """Delete the queue row (and its throughput) when it holds no job."""

        done: bool = await self._submit(partial(writes.delete_queue, queue))
        return done
