"""PostgresStore: the PostgreSQL backend: any number of sepp nodes on one database.

Writes go through the ``PgCommitter`` (group commit on ``writers`` connections of their
own); reads (``get_job``, ``next_due``, the admin listings) through an asyncpg pool of
``pool_size`` connections; one more connection LISTENs for the other nodes' wake-ups
(``listener``). Every connection's ``search_path`` is the sepp schema (``[postgres]
schema``), so several independent sepp installations (or test runs) can share one
database. See ``base.Store`` for the contract of each method; the write operations are in
``enqueue``, ``reserve``, ``settle``, ``sweeps``, ``queue_rows`` and ``nodes``; what they
do to a job is decided by ``sepp.domain.transitions``. The admin operations (``admin``)
get the store's ``reads`` (``reads.PgReads``), never the store.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from typing import cast

import asyncpg
from uuid_utils import UUID

from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.domain.policy import result_floor
from sepp.storage.base import (
    Dedups,
    ExtendResult,
    JobDependencies,
    JobOutcome,
    JobRecord,
    JobRow,
    NodeRecord,
    PeriodicRecord,
    PeriodicRun,
    PolicyLookup,
    QueueRecord,
    ReserveParams,
    SettleKind,
    SettleParams,
    SettleResult,
    StoreFigures,
    SweepResult,
    WorkerRecord,
)
from sepp.storage.dependencies import DependsOn, OnFailure
from sepp.storage.errors import StoreFailed, StoreUnavailable
from sepp.storage.postgres import enqueue, nodes, outcomes, periodic, queue_rows, reserve, settle, sweeps
from sepp.storage.postgres.admin import PostgresAdmin
from sepp.storage.postgres.admission import AdmissionSettings, publish
from sepp.storage.postgres.children import placed_children
from sepp.storage.postgres.committer import PgCommitter, store_error
from sepp.storage.postgres.finished import Finished, FinishedNotices
from sepp.storage.postgres.ids import JobIds
from sepp.storage.postgres.listener import Listener
from sepp.storage.postgres.reads import DRIVER_ERRORS, PgReads
from sepp.storage.postgres.schema import IDLE_TX_TIMEOUT, connect, connect_error, migrate, server_settings
from sepp.storage.postgres.sql import Q
from sepp.storage.postgres.sql_notices import SqlEnqueued, SqlEnqueueNotices, SqlJob
from sepp.storage.postgres.workflow_admin import WorkflowAdminPg
from sepp.storage.postgres.workflows import WorkflowParts
from sepp.storage.row_types import QueueRow, acked_results, any_keyed, leased_records
from sepp.storage.search import CustomEntry

_record = JobRecord._make
#: Longest ``ping`` waits for PostgreSQL, seconds (readiness: "answers within 1 s").
PING_TIMEOUT = 1.0


class PostgresStore(WorkflowParts, WorkflowAdminPg):
    """The store in schema ``schema`` of the database at ``dsn``.

    ``mode``: persist mode: ``sync`` and ``group`` commit with
    ``synchronous_commit = on`` (``sync`` one operation per transaction, ``group`` folding
    what waits at the same moment), ``async`` with ``synchronous_commit = off``.
    ``pool_size``: read connections; ``writers``: write connections (group commit);
    ``commit_delay``: seconds slept before each commit (a test knob). ``node``: this
    node's name (connection ``application_name``). ``clock``: the time of the job ids this
    store makes and the age of its blocks of seqs (``ids.JobIds``); every operation takes
    its ``now``. ``admission``: the node's strict mode, limits and queue defaults, written at
    ``open`` for the SQL enqueue functions (``admission``; None: left as stored).
    """

    def __init__(self, dsn: str, mode: str = "group", *, schema: str = "sepp", pool_size: int = 10,
                 writers: int = 4, commit_delay: float = 0.0, node: str = "", clock: Clock = SYSTEM_CLOCK,
                 admission: AdmissionSettings | None = None) -> None:
        self.dsn = dsn
        #: This node's admission settings, written at ``open`` for the SQL enqueue functions.
        self.admission = admission
        self.mode = mode
        self.schema = schema
        self.node = node
        self._pool_size = pool_size
        self._application = f"sepp {node}".strip()
        #: idle_in_transaction_session_timeout, seconds: the test knob ``commit_delay`` idles
        #: inside every transaction, so it lengthens the bound.
        self._idle_tx = IDLE_TX_TIMEOUT + commit_delay
        #: This store's token in NOTIFY payloads (its own notifications are ignored).
        self.origin = os.urandom(8).hex()
        self.channel = f"sepp_{schema}"
        self._committer = PgCommitter(self._connect_writer, writers=writers, channel=self.channel,
                                      origin=self.origin, max_group_ops=1 if mode == "sync" else 256,
                                      commit_delay=commit_delay)
        #: The read pool and the committer, as the admin operations use them.
        self._reads = PgReads(self._committer)
        self._listener = Listener(self._connect_listener, self.channel, self.origin)
        #: Finished jobs and waiting nodes, told to and heard from the other nodes (``finished``).
        self._notices = FinishedNotices(self._reads, self._listener, self.channel, self.origin)
        #: Jobs enqueued through the SQL functions, as this node hears of them.
        self._sql = SqlEnqueueNotices(self._reads, self._listener)
        self._promoted: Callable[[SweepResult, int], None] = _nobody
        #: The grant times of this node's reserves writing their leases right now: its
        #: reclaim passes free no lease ending after them (``reserve.Granting``).
        self._granting = reserve.Granting()
        #: This node's blocks of seqs and the job ids made of them (schema version 10).
        self._ids = JobIds(self._take_seqs, clock)
        #: Jobs whose ids ``new_job_ids`` is waiting for (a block of seqs): counted in
        #: ``backlog``, so the engine sheds enqueues while a block is slow to come as it
        #: does while commits are slow.
        self._awaiting_ids = 0
        # asyncpg's pool logs every connection it finds broken with a traceback (each
        # PostgreSQL restart); sepp reports the outage itself, one line per failed call.
        logging.getLogger("asyncpg.pool").setLevel(logging.ERROR)

    # ------------------------------------------------------------------ lifecycle

    async def _connect_writer(self) -> asyncpg.Connection:
        return await connect(self.dsn, self.schema, self.mode, self._application, self._idle_tx)

    async def _connect_listener(self) -> asyncpg.Connection:
        return await connect(self.dsn, self.schema, self.mode, f"{self._application} listen")

    async def open(self) -> None:
        """Create or migrate the schema (under its advisory lock), open the read pool, the
        writer connections and the listener.

        Raises ``StoreUnavailable`` (PostgreSQL not answering), ``StoreError`` (bad login,
        missing database, bad DSN) or ``StoreCorrupt`` (schema newer than this build), each
        with a one-line message."""
        conn = await connect(self.dsn, self.schema, self.mode, self._application)
        try:
            await migrate(conn, self.schema)
            if self.admission is not None:
                await publish(conn, self.schema, self.admission)
        except asyncpg.PostgresError as exc:
            raise store_error(exc) from exc
        finally:
            await conn.close()
        try:
            pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=self._pool_size, timeout=10,
                server_settings=server_settings(self.schema, self.mode, self._application, self._idle_tx))
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            raise connect_error(exc, self.dsn) from None
        self._reads.pool = pool
        try:
            await self._committer.start()
            await self._listener.start()
        except BaseException:
            await self._committer.stop()
            await pool.close()
            raise

    async def close(self) -> None:
        """Commit what was submitted, then close every connection. Idempotent."""
        reads = self._reads
        if reads.closed:
            return
        reads.closed = True
        await self._notices.close()
        await self._committer.stop()
        await self._listener.stop()
        if reads.pool is not None:
            try:
                await asyncio.wait_for(reads.pool.close(), 10)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                reads.pool.terminate()

    def abort(self) -> None:
        """``Store.abort``: drop every connection at once (PostgreSQL rolls back what was in
        flight; nothing committed is lost)."""
        self._committer.kill()
        self._listener.kill()
        if self._reads.pool is not None:
            self._reads.pool.terminate()

    async def failure(self) -> StoreFailed:
        """Never returns: a lost connection is made again (calls fail as ``UNAVAILABLE``
        meanwhile); nothing in this process stops the store for good."""
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    @property
    def shared(self) -> bool:
        """``Store.shared``: True, any number of nodes may use the database."""
        return True

    def subscribe(self, ready: Callable[[str | None], None], queues_changed: Callable[[], None]) -> None:
        """``Store.subscribe``: ``ready(queue)`` when another node made jobs of ``queue``
        ready, ``ready(None)`` after the listener connection was made again (notifications
        may have been missed); ``queues_changed()`` when another node changed queue rows."""
        self._listener.subscribe(ready, queues_changed)

    def subscribe_events(self, on_payload: Callable[[str], None]) -> None:
        """``Store.subscribe_events``: payloads of the events channel (``{channel}_ev``)."""
        self._listener.subscribe_events(on_payload)

    async def publish_events(self, payload: str) -> None:
        """``Store.publish_events``: one ``pg_notify`` on the events channel through the read
        pool (no job transaction waits for it). Raises ``StoreError``."""
        await self._reads.fetchval("SELECT pg_notify($1, $2)", self._listener.events_channel, payload)

    def on_promoted(self, promoted: Callable[[SweepResult, int], None]) -> None:
        """``Store.on_promoted``."""
        self._promoted = promoted

    def on_sql_enqueued(self, enqueued: SqlEnqueued) -> None:
        """``Store.on_sql_enqueued``: the SQL functions' notifications (``sql_notices``)."""
        self._sql.subscribe(enqueued)

    async def sql_enqueued_jobs(self, blocks: Sequence[tuple[int, int]]) -> list[SqlJob]:
        """``Store.sql_enqueued_jobs``: read on the pool by seq ranges (``sql_notices``)."""
        return await self._sql.jobs(blocks)

    def on_finished(self, finished: Finished) -> None:
        """``Store.on_finished``: what the other nodes tell (``finished.FinishedNotices``)."""
        self._notices.subscribe(finished)

    @property
    def others_waiting(self) -> bool:
        """``Store.others_waiting``: another node said it waits within ``finished.WAITING_TTL`` s."""
        return self._notices.others_waiting

    def finished(self, job_ids: Sequence[bytes], queues: Sequence[str]) -> None:
        """``Store.finished``: a NOTIFY on the read pool, batched, while others wait."""
        self._notices.finished(job_ids, queues)

    def waiting(self) -> None:
        """``Store.waiting``: one NOTIFY on the read pool, in the background."""
        self._notices.waiting()

    async def heartbeat(self, node: NodeRecord) -> None:
        """``Store.heartbeat``: upsert the node's row (one small transaction)."""
        await self._committer.submit(nodes.HeartbeatOp(node), 0)

    async def nodes(self) -> list[NodeRecord]:
        """``Store.nodes``: every node row, by name."""
        return [NodeRecord._make(r) for r in await self._reads.fetch(Q["nodes"])]

    async def report_workers(self, node: str, workers: Sequence[WorkerRecord], forget_before: int) -> None:
        """``Store.report_workers``: the node's rows replaced and old rows forgotten, in one
        transaction."""
        await self._committer.submit(nodes.ReportWorkersOp(node, list(workers), forget_before), 0)

    async def workers(self) -> list[WorkerRecord]:
        """``Store.workers``: every worker row, by worker then node."""
        return [WorkerRecord(w, n, h, tuple(q or ()), int(c), v, int(f), int(r), int(s), int(d), int(x), int(z))
                for w, n, h, q, c, v, f, r, s, d, x, z in await self._reads.fetch(Q["workers"])]

    @property
    def backlog(self) -> int:
        """Jobs submitted to the committer and not committed yet, and jobs waiting for their
        ids (``new_job_ids``; load shedding)."""
        return self._committer.backlog + self._awaiting_ids

    @property
    def commits(self) -> int:
        """Write transactions committed (metrics)."""
        return self._committer.commits

    @property
    def committer(self) -> PgCommitter:
        """The group committer (metrics, tests)."""
        return self._committer

    def figures(self) -> StoreFigures:
        """``Store.figures``: commits and the commit backlog."""
        return StoreFigures(self._committer.commits, self._committer.backlog, self._committer.stats.snapshot())

    async def ping(self) -> None:
        """``Store.ping``: ``SELECT 1`` on the read pool with asyncpg's own ``PING_TIMEOUT``
        on the query. Raises ``StoreUnavailable`` / ``StoreError`` (``store_error``) when
        PostgreSQL does not answer in time or refuses, ``StoreClosed`` once closing. The wait
        for a pool connection is not bounded here: the caller bounds the whole ping (on a
        silent network even a cancelled query waits for the database)."""
        try:
            await self._reads.reader().fetchval(Q["ping"], timeout=PING_TIMEOUT)
        except TimeoutError:
            raise StoreUnavailable(f"PostgreSQL unavailable: no answer to SELECT 1 within {PING_TIMEOUT:g} s") from None
        except DRIVER_ERRORS as exc:
            raise store_error(exc) from exc

    @property
    def admin(self) -> PostgresAdmin:
        """The admin operations (``sepp.storage.admin.AdminStore``)."""
        return PostgresAdmin(self._reads)

    @property
    def reads(self) -> PgReads:
        """Reads on the pool and writes through the committer (admin, tests, benchmarks)."""
        return self._reads

    # ------------------------------------------------------------------ enqueue and queues

    async def new_job_ids(self, n: int) -> list[UUID]:
        """``Store.new_job_ids``: ids that carry a seq of this node's block (``ids.JobIds``);
        waits for a block (one ``nextval`` statement on the read pool) when this node has
        too few seqs left. Raises ``StoreUnavailable`` / ``StoreError`` as a read does."""
        self._awaiting_ids += n  # in the backlog while they wait (``backlog``)
        try:
            return await self._ids.take(n)
        finally:
            self._awaiting_ids -= n

    async def _take_seqs(self, blocks: int) -> list[int]:
        """``blocks`` fresh values of the jobs sequence, each the start of a block of
        ``ids.BLOCK`` seqs (``JobIds``' fetch)."""
        return [r[0] for r in await self._reads.fetch(Q["take_seqs"], blocks)]

    async def _seqs(self, rows: Sequence[JobRow]) -> tuple[list[int], list[bytes]]:
        """Each row's seq — the one its id carries (``new_job_ids``), or for a foreign id a seq
        of this node's blocks (they stay dense) — and the foreign ids."""
        seq_of = self._ids.seq_of
        carried = [seq_of(row.id) for row in rows]
        if None not in carried:
            return cast("list[int]", carried), []
        more = iter(await self._ids.take_seqs(carried.count(None)))
        seqs = [next(more) if s is None else s for s in carried]
        return seqs, [row.id for row, s in zip(rows, carried, strict=True) if s is None]

    async def enqueue(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                      new_queues: Sequence[QueueRecord] = (), custom: Sequence[CustomEntry] = (),
                      depends_on: DependsOn | None = None, on_failure: OnFailure | None = None) -> Dedups:
        """See ``Store.enqueue``: one transaction; keys claimed with ``INSERT … ON CONFLICT``
        (exactly once across nodes; ``queries.sql`` ``claim_keys``). Calls with custom-index
        entries take the ``EnqueueOp`` path (jobs and entries in one transaction), so a call
        without any folds with the other plain enqueues exactly as before.
        A row whose id this node made (``new_job_ids``) is stored with the seq its id carries;
        any other id is foreign (a seq of this node's blocks, indexed in ``jobs_id_foreign``):
        such a call takes the ``EnqueueOp`` path, which first refuses (``StoreError``) a
        foreign id that a row already has as its native id — ``jobs_id_foreign`` holds only
        foreign ids, so nothing else keeps a second row from taking the id (another node's
        job then hidden from every lookup by id)."""
        seqs, foreign = await self._seqs(rows)
        if not foreign and not new_queues and not custom and not depends_on and not any_keyed(rows):
            records = [(*row, s) for row, s in zip(rows, seqs, strict=True)]
            return await self._committer.submit(enqueue.InsertOp(records), len(rows))
        return await self._committer.submit(
            enqueue.EnqueueOp(rows, dedup_until, now, new_queues, custom, seqs, foreign, depends_on, on_failure),
            len(rows))

    async def load_queues(self) -> list[QueueRecord]:
        """Every persisted queue, by name."""
        return [QueueRow._make(r).record() for r in await self._reads.fetch(Q["load_queues"])]

    async def upsert_queue(self, queue: QueueRecord, now: int) -> None:
        """Create or replace a queue row."""
        await self._committer.submit(queue_rows.QueueOp(queue, now), 0)

    async def change_queue(self, name: str, change: Callable[[QueueRecord | None], QueueRecord],
                           now: int) -> QueueRecord:
        """See ``Store.change_queue``: ``SELECT … FOR UPDATE`` of the row, ``change``, then
        the UPDATE (or INSERT) in one transaction through the committer."""
        result = await self._committer.submit(queue_rows.ChangeQueueOp(name, change, now), 0)
        if isinstance(result, queue_rows.Refused):
            raise result.exc
        return result

    # ------------------------------------------------------------------ worker side

    async def reserve(self, params: ReserveParams) -> list[JobRecord]:
        """Promote due jobs, then lease up to ``max_jobs`` READY jobs from the queues in order
        with ``FOR UPDATE SKIP LOCKED`` (no job leased twice, however many nodes reserve).
        Every job of the call gets the same fresh random 128-bit lease id. The leases run
        from when the committer runs the operation (``reserve.ReserveOp.granted``), which is
        the jobs' ``started_at``."""
        worker, node = params.worker_id, params.node
        lease_id = os.urandom(16)
        records: list[JobRecord] = []
        op = reserve.ReserveOp(params, lease_id, self._granting)
        leased = await self._committer.submit(op, 0)
        now = op.granted
        if op.promoted.count:
            self._promoted(op.promoted, op.promoted_at)
        for queue, expires, rows in leased:
            records.extend(leased_records(rows, queue, lease_id, expires, worker, now, node))
        return records

    async def reserve_damaged(self, leases: Sequence[tuple[bytes, bytes]], now: int) -> int:
        """See ``Store.reserve_damaged``: one transaction."""
        return await self._committer.submit(reserve.BuryLeasedOp(list(leases), now), 0)

    async def settle(self, items: Sequence[SettleParams], policy: PolicyLookup) -> list[SettleResult]:
        """Apply acks/nacks in one transaction (``Store.settle``): acks of live leases in one
        statement, everything else one by one with the row locked."""
        ack = SettleKind.ACK
        acks = [p for p in items if p.kind is ack]
        if len(acks) < 2 or len({p.job_id for p in items}) != len(items):
            return await self._committer.submit(
                settle.SettleEachOp(items, policy, await placed_children(acks, self._seqs)), len(items))
        now = acks[0].now
        default_keep = policy("").completed_retention
        # An ack whose result some queue could refuse is judged one by one (its queue's
        # limit looked up, the row locked), and so is an ack with children; every other ack
        # of this time is folded.
        floor = result_floor(policy)
        folded = [p for p in acks
                  if p.now == now and p.children is None and (p.result is None or len(p.result) <= floor)]
        others = ({} if len(folded) == len(items)  # the common case: every item folded
                  else {i: p for i, p in enumerate(items) if p.kind is not ack or p.now != now
                        or p.children is not None or (p.result is not None and len(p.result) > floor)})
        placed = await placed_children(others.values(), self._seqs) if others else None
        rows, refused, other_results = await self._committer.submit(
            settle.AckManyOp(folded, others, now, default_keep, policy, placed), len(items))
        done = acked_results(rows, now)
        done.update(refused)
        if not others:
            return [done[p.job_id] for p in items]
        return [other_results[i] if i in others else done[p.job_id] for i, p in enumerate(items)]

    async def extend(self, job_id: bytes, lease_id: bytes, now: int, expires_at: int,
                     clock: Clock | None = None, progress: str | None = None) -> ExtendResult:
        """Push a live lease's expiry to ``expires_at`` (µs), measured from when the committer
        writes it with a ``clock``, and store ``progress`` with it (``Store.extend``)."""
        return await self._committer.submit(settle.ExtendOp(job_id, lease_id, now, expires_at, clock, progress), 0)

    # ------------------------------------------------------------------ sweeps

    async def promote_due(self, now: int, limit: int) -> SweepResult:
        """SCHEDULED → READY for due jobs; rows another node promotes are skipped (it does)."""
        return await self._committer.submit(sweeps.PromoteOp(now, limit), 0)

    async def next_due(self) -> int | None:
        """Earliest run_at among SCHEDULED jobs (µs), or None."""
        value = await self._reads.fetchval(Q["next_due"])
        return None if value is None else int(value)

    async def reclaim_expired(self, now: int, limit: int, policy: PolicyLookup) -> SweepResult:
        """Expired leases → READY, or CANCELLED / DEAD_LETTERED (``transitions.reclaim``).
        ``now`` is lowered, when the pass runs, to the grant time of a reserve of this node
        writing its leases at that moment (``reserve.Granting``)."""
        return await self._committer.submit(sweeps.ReclaimOp(now, limit, policy, self._granting), 0)

    async def prune(self, now: int, limit: int) -> SweepResult:
        """Delete finished jobs past retention, then expired idempotency keys."""
        return await self._committer.submit(sweeps.PruneOp(now, limit), 0)

    # ------------------------------------------------------------------ reads

    async def get_job(self, job_id: bytes) -> JobRecord | None:
        """One job by id (read pool)."""
        row = await self._reads.fetchrow(Q["get_job"], job_id)
        return None if row is None else _record(tuple(row))

    async def job_dependencies(self, job_id: bytes) -> JobDependencies | None:
        """``Store.job_dependencies``: one statement on the read pool (``outcomes``)."""
        return await outcomes.job_dependencies(self._reads, job_id)

    async def job_outcomes(self, job_ids: Sequence[bytes]) -> list[JobOutcome]:
        """``Store.job_outcomes``: one statement on the read pool (``outcomes``)."""
        return await outcomes.job_outcomes(self._reads, job_ids)

    # ------------------------------------------------------------------ periodic schedules

    async def load_periodic(self, names: Sequence[str] | None = None) -> list[PeriodicRecord]:
        """``Store.load_periodic``: one read on the pool."""
        if names is None:
            return [periodic.record(r) for r in await self._reads.fetch(periodic.P["load_all"])]
        return [periodic.record(r) for r in await self._reads.fetch(periodic.P["load_named"], list(names))]

    async def put_periodic(self, name: str, definition: str, source: str, now: int) -> bool:
        """``Store.put_periodic``: one statement (the other nodes are told)."""
        return await self._committer.submit(periodic.PutOp(name, definition, source, now), 0)

    async def set_periodic_paused(self, name: str, paused: bool, now: int) -> PeriodicRecord | None:
        """``Store.set_periodic_paused``: one statement (the other nodes are told)."""
        return await self._committer.submit(periodic.PauseOp(name, paused, now), 0)

    async def delete_periodic(self, name: str) -> bool:
        """``Store.delete_periodic``: one statement (the other nodes are told)."""
        return await self._committer.submit(periodic.DeleteOp(name), 0)

    async def record_periodic_runs(self, runs: Sequence[PeriodicRun]) -> None:
        """``Store.record_periodic_runs``: one statement."""
        if runs:
            await self._committer.submit(periodic.RecordRunsOp(list(runs)), 0)


def _nobody(_promoted: SweepResult, _now: int) -> None:
    """The ``on_promoted`` callback until one is set."""
