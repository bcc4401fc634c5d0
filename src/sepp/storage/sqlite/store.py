"""SQLiteStore: the embedded backend (one WAL file, one writer, reader threads).

Every write is an operation run on the single writer connection, by the ``Committer``
(a thread of this process) or the ``ProcessCommitter`` (a child process: what ``sepp
serve`` uses); reads use per-thread read-only connections (WAL lets them run beside the
writer). See ``base.Store`` for the contract of each method.

This module is the façade; the driver is split by duty: ``ops`` (the write operations run
on the writer: enqueue, reserve, settle, extend), ``sweeps`` (promotion, reclaim, prune),
``sql`` (the named queries and the statement builders), ``schema`` (the writer connection
and migrations), ``reads`` (the reader threads and the writer's submit: all that the admin
operations, ``admin``, get of the store), ``one_node`` (the protocol's methods about other
nodes, of which SQLite has none). What a settle or a reclaim does to a job is
decided by ``sepp.domain.transitions``; the driver applies it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

import uuid_utils
from uuid_utils import UUID

from sepp.domain.clock import Clock
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
from sepp.storage.commit_stats import merge
from sepp.storage.dependencies import DependsOn, OnFailure
from sepp.storage.errors import StoreError, StoreFailed, StoreLocked
from sepp.storage.row_types import QueueRow, acked_results, any_keyed, leased_records
from sepp.storage.rows import repair_job
from sepp.storage.search import CustomEntry
from sepp.storage.sqlite import ops, outcomes, periodic, sweeps
from sepp.storage.sqlite.admin import SQLiteAdmin
from sepp.storage.sqlite.children import store_children
from sepp.storage.sqlite.committer import Committer, MergeableInsert, Op, Probe
from sepp.storage.sqlite.lone import BATCH_QUIET, LONE_MAX_JOBS, LoneBusy, LoneWriter
from sepp.storage.sqlite.one_node import OneNode
from sepp.storage.sqlite.reads import SQLiteReads
from sepp.storage.sqlite.schema import connect_writer
from sepp.storage.sqlite.sql import ACK_CHUNK, Q, insert_statements
from sepp.storage.sqlite.workflow_admin import WorkflowAdminSQLite
from sepp.storage.sqlite.workflows import WorkflowWrites
from sepp.storage.sqlite.writer_process import ProcessCommitter

T = TypeVar("T")

DB_FILE = "sepp.db"
#: Held (flock) by the process that owns the folder: one sepp per data folder.
LOCK_FILE = "sepp.lock"


_record = JobRecord._make  # rows of get_job are JobRecord fields in order


class SQLiteStore(OneNode, WorkflowWrites, WorkflowAdminSQLite):
    """The embedded store in ``data_dir/sepp.db``.

    ``mode`` is the persist mode (``sync`` | ``group`` | ``async``);
    ``cache_mib`` the page cache of the writer connection. ``writer`` is ``thread`` (the
    writer loop in a thread of this process) or ``process`` (in a child process of its own,
    ``writer_process``: what ``sepp serve`` uses). Every write operation below is a
    module-level function bound with ``functools.partial``, so either can run it.
    """

    def __init__(self, data_dir: Path, mode: str = "group", *, cache_mib: int = 64,
                 fsync_interval: float = 0.05, commit_delay: float = 0.0, max_group_ops: int = 1024,
                 group_wait: float = 0.004, writer: str = "thread") -> None:
        self.path = Path(data_dir) / DB_FILE
        self._promoted: Callable[[SweepResult, int], None] = _nobody
        self.mode = mode
        self._cache_mib = cache_mib
        self._committer: Committer | ProcessCommitter
        if writer == "process":
            self._committer = ProcessCommitter({
                "path": str(self.path), "mode": mode, "cache_mib": cache_mib, "max_group_ops": max_group_ops,
                "fsync_interval": fsync_interval, "commit_delay": commit_delay, "group_wait": group_wait})
        elif writer == "thread":
            self._committer = Committer(self.path, mode, self._connect_writer, fsync_interval=fsync_interval,
                                        commit_delay=commit_delay, max_group_ops=max_group_ops,
                                        group_wait=group_wait)
        else:
            raise ValueError(f"writer must be 'thread' or 'process', not {writer!r}")
        #: One-job enqueues run here when the committer is idle; not with the
        #: commit-delay fault knob, whose tests need every write to pass the committer.
        self._lone: LoneWriter | None = LoneWriter(self.path, mode) if not commit_delay else None
        #: Batch inserts waiting for the committer now, and when two last did (``time.perf_counter``
        #: seconds, an interval like the lone path's ``QUIET_GAP``, not a clock reading).
        self._batches_waiting = 0
        self._batches_overlapped = -BATCH_QUIET
        #: The reader threads and the writer, as the admin operations use them.
        self._reads = SQLiteReads(self.path, self._committer)
        self._lock_fd: int | None = None
        self._node: NodeRecord | None = None
        self._workers: list[WorkerRecord] = []

    # ------------------------------------------------------------------ lifecycle

    def _connect_writer(self) -> sqlite3.Connection:
        """Open, configure, migrate and write-probe the writer connection (``connect_writer``)."""
        return connect_writer(self.path, self.mode, self._cache_mib)

    async def open(self) -> None:
        """Lock the data folder, create/migrate the schema and start the writer thread.

        Raises ``StoreLocked`` when another sepp process holds the folder, and
        ``StoreError`` when the folder cannot be used.
        """
        self._lock_folder()
        try:
            await self._committer.start()
        except BaseException:
            self._unlock_folder()
            raise
        if self._lone is not None:
            try:
                self._lone.open()
            except sqlite3.Error:  # the committer has the file: writes still work through it
                self._lone = None

    def _lock_folder(self) -> None:
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot use data folder {folder}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _lock_holder(fd)
            os.close(fd)
            raise StoreLocked(f"data folder {folder} is in use by another sepp process{holder}: stop that one "
                              f"first, or give this one another data folder (data_dir, --data-dir)") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _unlock_folder(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    async def close(self) -> None:
        """Commit what was submitted, stop the writer, close readers. Idempotent."""
        if self._lone is not None:
            self._lone.close()
        await self._committer.stop()
        self._reads.close()
        self._unlock_folder()

    async def failure(self) -> StoreFailed:
        """Wait until the store can no longer write: its writer process ended unexpectedly
        (``writer="process"``). Never returns with the writer thread."""
        if isinstance(self._committer, ProcessCommitter):
            return await self._committer.failure()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def kill_writer(self) -> None:
        """Forced stop: SIGKILL the writer process (``writer="process"``); a crash for the
        writes in flight, nothing acknowledged is lost. No-op with the writer thread."""
        if isinstance(self._committer, ProcessCommitter):
            self._committer.kill()

    @property
    def backlog(self) -> int:
        """Jobs waiting for the writer (for load shedding)."""
        return self._committer.backlog

    @property
    def commits(self) -> int:
        """Write transactions committed: by the committer and on the lone-write path (metrics)."""
        return self._committer.commits + (self._lone.commits if self._lone is not None else 0)

    @property
    def committer(self) -> Committer | ProcessCommitter:
        """The writer (metrics, tests)."""
        return self._committer

    @property
    def admin(self) -> SQLiteAdmin:
        """The admin operations (listings, stats, redrive; ``sepp.storage.admin.AdminStore``)."""
        return SQLiteAdmin(self._reads, self._woken)

    @property
    def reads(self) -> SQLiteReads:
        """Reads on the reader threads and writes through the writer (admin, tests)."""
        return self._reads

    # ------------------------------------------------------------------ enqueue

    async def new_job_ids(self, n: int) -> list[UUID]:
        """``Store.new_job_ids``: random UUIDv7s (SQLite finds a job by its id's own index)."""
        uuid7 = uuid_utils.uuid7
        return [uuid7() for _ in range(n)]

    async def enqueue(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                      new_queues: Sequence[QueueRecord] = (), custom: Sequence[CustomEntry] = (),
                      depends_on: DependsOn | None = None, on_failure: OnFailure | None = None) -> Dedups:
        """See ``Store.enqueue``: one transaction; dedup against live keys and within the call.
        Calls with custom-index entries or dependencies take the keyed path (``ops.enqueue_op``),
        so a call without any runs exactly as before (nothing added to it)."""
        if depends_on:
            op = partial(ops.enqueue_op, rows, dedup_until, now, new_queues, custom, depends_on=depends_on,
                         on_failure=on_failure)
            return await self._committer.submit(op, len(rows))
        if not new_queues and not custom and not any_keyed(rows):
            if len(rows) == 1:  # concurrent single enqueues are folded into one statement by the committer
                return await self._write_one(MergeableInsert(ops.insert_jobs, list(rows), {}))
            # The statements are prepared here, on the event loop: the writer only runs them
            # (docs/decisions.md "The writer runs SQL, the event loop builds").
            statements = insert_statements(rows)
            return await self._write_batch(partial(ops.run_inserts, statements), len(rows))

        op = partial(ops.enqueue_op, rows, dedup_until, now, new_queues, custom)
        if len(rows) == 1:
            return await self._write_one(op)
        return await self._committer.submit(op, len(rows))

    async def _write_one(self, op: Op[Dedups]) -> Dedups:
        """A one-job write: on the lone-write path when nothing else is writing (no operation
        in the committer, none just before), else through the committer, where it is grouped
        with the others (``sepp.storage.sqlite.lone``)."""
        lone = self._lone
        if lone is not None and self._committer.idle and lone.quiet(self._committer.commits):
            try:
                return lone.run(op)
            except LoneBusy:
                pass
        return await self._committer.submit(op, 1)

    async def _write_batch(self, op: Op[Dedups], jobs: int) -> Dedups:
        """A plain batch insert of ``jobs`` jobs: like ``_write_one``, on the lone-write path
        when nothing else is writing and the batch is at most ``LONE_MAX_JOBS`` jobs (a
        sequential producer's batches skip the writer hop), else through the committer.

        Batches sent several at a time (``enqueue_many``) keep to the committer: the writer
        process inserts one while the event loop prepares the next, where lone batches would
        run them all on the event loop one after another (measured: 59–61k against 61–75k
        jobs/s with 4 in flight). So once two batches waited for the committer at the same
        time, none takes the lone path for ``BATCH_QUIET`` seconds."""
        lone = self._lone
        if (jobs <= LONE_MAX_JOBS and lone is not None and self._committer.idle
                and time.perf_counter() - self._batches_overlapped > BATCH_QUIET
                and lone.quiet(self._committer.commits)):
            try:
                return lone.run(op, jobs)
            except LoneBusy:
                pass
        self._batches_waiting += 1
        if self._batches_waiting > 1:
            self._batches_overlapped = time.perf_counter()
        try:
            return await self._committer.submit(op, jobs)
        finally:
            self._batches_waiting -= 1

    # ------------------------------------------------------------------ queues

    async def load_queues(self) -> list[QueueRecord]:
        """Every persisted queue, by name."""
        rows = await self._committer.submit(partial(ops.fetch_all, Q["load_queues"], ()))
        return [QueueRow._make(row).record() for row in rows]

    async def upsert_queue(self, queue: QueueRecord, now: int) -> None:
        """Create or replace a queue row."""
        params = (queue.name, queue.settings_json, int(queue.paused), int(queue.declared), now, now)
        await self._committer.submit(partial(ops.execute, Q["upsert_queue"], params))

    async def change_queue(self, name: str, change: Callable[[QueueRecord | None], QueueRecord],
                           now: int) -> QueueRecord:
        """See ``Store.change_queue``. The writer runs SQL only (docs/decisions.md "The
        writer runs SQL, the event loop builds"; its process cannot call ``change``), so
        ``change`` runs here over the row read through the writer, and the writer writes its
        result only if the row is still the one read (``ops.write_queue_if``, one statement
        in its transaction); otherwise ``change`` runs again over the row it returns. With one
        writer that is the same as a locked read-change-write."""
        rows = await self._committer.submit(partial(ops.fetch_all, Q["get_queue"], (name,)))
        row = QueueRow._make(rows[0]) if rows else None
        while True:
            stored = None if row is None else row.record()
            new = change(stored)
            seen = None if row is None else (row.settings, row.paused, row.declared)
            current = await self._committer.submit(partial(
                ops.write_queue_if, name, seen, (new.settings_json, int(new.paused), int(new.declared)), now))
            if current is None:
                return QueueRecord(name, new.settings_json, new.paused, new.declared)
            row = QueueRow._make(current)

    # ------------------------------------------------------------------ worker side

    async def reserve(self, params: ReserveParams) -> list[JobRecord]:
        """Promote due jobs, then lease up to ``max_jobs`` READY jobs from ``queues`` in order:
        per queue one SELECT of the jobs in reserve order and one UPDATE that leases exactly
        those. Every job of the call gets the same fresh random 128-bit lease id (a lease is
        the pair job id + lease id; docs/decisions.md "One lease id per Reserve call"). The
        leases run from when the writer grants them (``ReserveParams.grant_time``), which is
        the jobs' ``started_at``."""
        worker, node = params.worker_id, params.node
        lease_id = os.urandom(16)

        records: list[JobRecord] = []
        leased, promoted, now = await self._committer.submit(partial(ops.reserve_op, params, lease_id), 0)
        if promoted.count:
            self._promoted(promoted, now)
        for queue, expires, rows in leased:
            records.extend(leased_records(rows, queue, lease_id, expires, worker, now, node))
        return records

    async def reserve_damaged(self, leases: Sequence[tuple[bytes, bytes]], now: int) -> int:
        """See ``Store.reserve_damaged``: one transaction."""
        return await self._committer.submit(partial(ops.bury_leased_op, list(leases), now), 0)

    async def settle(self, items: Sequence[SettleParams], policy: PolicyLookup) -> list[SettleResult]:
        """Apply acks/nacks in one transaction (see ``Store.settle``). Acks of live leases go
        in one statement; everything else (nacks, refused or repeated acks) one by one.

        The batched acks' statements are prepared here and their results built here, on the
        event loop; the writer runs the SQL (docs/decisions.md "The writer runs SQL, the event
        loop builds")."""
        ack = SettleKind.ACK
        acks = [p for p in items if p.kind is ack]
        if len(acks) < 2 or len({p.job_id for p in items}) != len(items):
            # Nothing to fold, or one job twice: apply strictly in request order.
            return await self._woken(partial(ops.settle_each, items, policy, children=store_children), len(items))
        now = acks[0].now
        default_keep = policy("").completed_retention
        # An ack whose result some queue could refuse is judged one by one (its queue's
        # limit looked up), and so is an ack with children; every other ack of this time is
        # folded into the statements.
        floor = result_floor(policy)
        folded = [p for p in acks
                  if p.now == now and p.children is None and (p.result is None or len(p.result) <= floor)]
        results = any(p.result is not None for p in folded)
        # Only what the writer needs crosses to it: the acks as statement parameters (at most
        # ACK_CHUNK per statement: preparing a VALUES list costs more than linearly in its
        # length, and one statement text is cached per length), the rest by item index.
        # Acks without results bind (job id, lease id) alone (ack_many_head); when any carries
        # one, each binds its result and encoding too (ack_many_results_head).
        statements: list[list[object]] = []
        for start in range(0, len(folded), ACK_CHUNK):
            chunk_params: list[object] = [now, default_keep]
            if results:
                for p in folded[start:start + ACK_CHUNK]:
                    chunk_params += (p.job_id, p.lease_id, p.result,
                                     None if p.result is None else p.result_encoding)
            else:
                for p in folded[start:start + ACK_CHUNK]:
                    chunk_params.append(p.job_id)
                    chunk_params.append(p.lease_id)
            statements.append(chunk_params)
        others = ({} if len(folded) == len(items)  # the common case: every item folded
                  else {i: p for i, p in enumerate(items) if p.kind is not ack or p.now != now
                        or p.children is not None or (p.result is not None and len(p.result) > floor)})
        rows, refused, other_results = await self._woken(
            partial(ops.ack_many, statements, others, now, default_keep, policy, results=results,
                    children=store_children if others else None), len(items))
        done = acked_results(rows, now)
        done.update(refused)
        if not others:
            return [done[p.job_id] for p in items]
        return [other_results[i] if i in others else done[p.job_id] for i, p in enumerate(items)]

    async def _woken(self, op: Op[T], weight: int) -> T:
        """Run the settle ``op`` and wake the long polls of the queues its completions made
        dependents READY in (``ops.with_wakes``), after the commit."""
        value, queues = await self._committer.submit(partial(ops.with_wakes, op), weight)
        if queues:  # a wake-up only: no promotion to report (no run_at, no events)
            self._promoted(SweepResult(0, frozenset(queues)), 0)
        return value

    async def extend(self, job_id: bytes, lease_id: bytes, now: int, expires_at: int,
                     clock: Clock | None = None, progress: str | None = None) -> ExtendResult:
        """Push a live lease's expiry to ``expires_at`` (µs), measured from when the writer
        writes it with a ``clock``, and store ``progress`` with it (``Store.extend``)."""

        return await self._committer.submit(partial(ops.extend_op, job_id, lease_id, now, expires_at, clock,
                                                    progress))

    # ------------------------------------------------------------------ sweeps

    async def promote_due(self, now: int, limit: int) -> SweepResult:
        """SCHEDULED → READY for due jobs (indexed by run_at); an unprocessable row is skipped
        (``Store.promote_due``)."""
        # Sweeps weigh 0: housekeeping must not count as producer backlog (load shedding).
        return await self._committer.submit(partial(sweeps.promote_op, now, limit), 0)

    async def next_due(self) -> int | None:
        """Earliest run_at among SCHEDULED jobs (µs), or None."""
        row = await self._reads.read(Q["next_due"], one=True)
        return None if row is None else row[0]

    async def reclaim_expired(self, now: int, limit: int, policy: PolicyLookup) -> SweepResult:
        """Expired leases → READY, or DEAD_LETTERED with LEASE_EXPIRED on the last attempt."""

        return await self._woken(partial(sweeps.reclaim_op, now, limit, policy), 0)

    async def prune(self, now: int, limit: int) -> SweepResult:
        """Delete finished jobs past retention, then expired idempotency keys; an
        unprocessable row is skipped (``Store.prune``)."""

        return await self._committer.submit(partial(sweeps.prune_op, now, limit), 0)

    # ------------------------------------------------------------------ reads

    async def get_job(self, job_id: bytes) -> JobRecord | None:
        """One job by id (read connection); a damaged field reads as unset or clamped
        (``storage.rows.repair_job``, logged once per job)."""
        row = await self._reads.read(Q["get_job"], (job_id,), one=True)
        return None if row is None else repair_job(_record(row))

    async def job_dependencies(self, job_id: bytes) -> JobDependencies | None:
        """``Store.job_dependencies``: one read on a reader thread (``outcomes``)."""
        return await outcomes.job_dependencies(self._reads, job_id)

    async def job_outcomes(self, job_ids: Sequence[bytes]) -> list[JobOutcome]:
        """``Store.job_outcomes``: one read on a reader thread (``outcomes``)."""
        return await outcomes.job_outcomes(self._reads, job_ids)

    # ------------------------------------------------------------------ Store protocol: stop, metrics

    def abort(self) -> None:
        """``Store.abort``: the forced stop is ``kill_writer`` (SIGKILL the writer process)."""
        self.kill_writer()

    def figures(self) -> StoreFigures:
        """``Store.figures``: commits (committer + lone-write path) and the commit backlog."""
        stats = self._committer.stats
        if self._lone is not None:
            stats = merge(stats, self._lone.stats.snapshot())
        return StoreFigures(self.commits, self._committer.backlog, stats)

    async def ping(self) -> None:
        """``Store.ping``: ``SELECT 1`` on a reader connection and, at the same time, a
        ``Probe`` round trip through the writer (thread or process: a stopped or hung
        writer process does not answer it), which commits nothing. Raises ``StoreClosed``
        once closing, ``StoreFailed`` when the writer process is gone, ``StoreError`` for an
        SQLite failure."""
        answered = self._committer.submit(Probe(), 0)  # raises StoreClosed before any read starts
        try:
            await asyncio.gather(self._reads.read(Q["ping"], one=True), answered)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite: {exc}") from exc

    # ------------------------------------------------------------------ periodic schedules

    async def load_periodic(self, names: Sequence[str] | None = None) -> list[PeriodicRecord]:
        """``Store.load_periodic``: read on the writer (what was just written is seen)."""
        return await self._committer.submit(partial(periodic.load, None if names is None else list(names)), 0)

    async def put_periodic(self, name: str, definition: str, source: str, now: int) -> bool:
        """``Store.put_periodic``: one transaction."""
        return await self._committer.submit(partial(periodic.put, name, definition, source, now), 0)

    async def set_periodic_paused(self, name: str, paused: bool, now: int) -> PeriodicRecord | None:
        """``Store.set_periodic_paused``: one transaction."""
        return await self._committer.submit(partial(periodic.set_paused, name, paused, now), 0)

    async def delete_periodic(self, name: str) -> bool:
        """``Store.delete_periodic``: one transaction."""
        return await self._committer.submit(partial(periodic.delete, name), 0)

    async def record_periodic_runs(self, runs: Sequence[PeriodicRun]) -> None:
        """``Store.record_periodic_runs``: one transaction."""
        if runs:
            await self._committer.submit(partial(periodic.record_runs, list(runs)), 0)


def _nobody(_promoted: SweepResult, _now: int) -> None:
    """The ``on_promoted`` callback until one is set."""


def _lock_holder(fd: int) -> str:
    """`` (pid N)`` naming the process that holds the data folder's lock, read from the lock
    file ``fd`` (its holder writes its pid there once it has the lock); empty when the file
    holds no pid (its holder has not written it yet) or cannot be read."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
