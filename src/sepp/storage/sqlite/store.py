"""SQLiteStore: the embedded backend (one WAL file, one writer thread, reader threads).

Every write is an operation run by the ``Committer`` on the single writer
connection; reads use per-thread read-only connections (WAL lets them run beside
the writer). See ``base.Store`` for the contract of each method.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import random
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from sepp.quoting import clip
from sepp.storage._sql import load_queries, migrations
from sepp.storage.base import (
    DAMAGED_ROW,
    Dedups,
    ExtendResult,
    JobRecord,
    JobRow,
    PolicyLookup,
    QueueRecord,
    ReserveParams,
    SettleError,
    SettleKind,
    SettleParams,
    SettleResult,
    SkippedRow,
    State,
    StoreFigures,
    SweepResult,
)
from sepp.storage.errors import StoreCorrupt, StoreError, StoreFailed, StoreLocked
from sepp.storage.rows import LenientText, describe, fetch_lenient, is_decode_error, note_damaged, repair_job
from sepp.storage.sqlite.admin import SQLiteAdmin
from sepp.storage.sqlite.committer import Committer, MergeableInsert, Op
from sepp.storage.sqlite.lone import LoneBusy, LoneWriter
from sepp.storage.sqlite.writer_process import ProcessCommitter

Q = load_queries("sepp.storage.sqlite")
_PKG = "sepp.storage.sqlite"
DB_FILE = "sepp.db"
#: Held (flock) by the process that owns the folder: one sepp per data folder.
LOCK_FILE = "sepp.lock"
#: Reason recorded when a cancel requested during a reservation takes effect.
CANCELLED_WHILE_RESERVED = "cancelled by admin while reserved"
_READY, _RESERVED = int(State.READY), int(State.RESERVED)


_record = JobRecord._make  # rows of get_job are JobRecord fields in order


class SQLiteStore:
    """The embedded store in ``data_dir/sepp.db``.

    ``mode`` is the persist mode (``sync`` | ``group`` | ``async``, SPEC §5);
    ``cache_mib`` the page cache of the writer connection. ``writer`` is ``thread`` (the
    writer loop in a thread of this process) or ``process`` (in a child process of its own,
    ``writer_process``: what ``sepp serve`` uses). Every write operation below is a
    module-level function bound with ``functools.partial``, so either can run it.
    """

    def __init__(self, data_dir: Path, mode: str = "group", *, cache_mib: int = 64,
                 fsync_interval: float = 0.05, commit_delay: float = 0.0, max_group_ops: int = 1024,
                 group_wait: float = 0.004, writer: str = "thread") -> None:
        self.path = Path(data_dir) / DB_FILE
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
        #: One-job enqueues run here when the committer is idle (issue 15); not with the
        #: commit-delay fault knob, whose tests need every write to pass the committer.
        self._lone: LoneWriter | None = LoneWriter(self.path, mode) if not commit_delay else None
        self._readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sepp-reader")
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._lock_fd: int | None = None

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
            os.close(fd)
            raise StoreLocked(f"data folder {folder} is in use by another sepp process") from None
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
        self._readers.shutdown(wait=True)
        for conn in self._reader_conns:
            conn.close()
        self._reader_conns.clear()
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
        return SQLiteAdmin(self)

    async def _read(self, sql: str, params: Sequence[Any] = (), one: bool = False) -> Any:
        def run() -> Any:
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None,
                                       check_same_thread=False)
                conn.execute("PRAGMA busy_timeout=10000")
                self._local.conn = conn
                self._reader_conns.append(conn)
            # A text value that is not UTF-8 (a damaged row) is read with U+FFFD instead of
            # failing the read of every row with it (issue 14; storage.rows).
            return fetch_lenient(conn, sql, params, one)

        return await asyncio.get_running_loop().run_in_executor(self._readers, run)

    # ------------------------------------------------------------------ enqueue

    async def enqueue(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                      new_queues: Sequence[QueueRecord] = ()) -> Dedups:
        """See ``Store.enqueue``: one transaction; dedup against live keys and within the call."""
        if not new_queues and not any(row[11] for row in rows):
            if len(rows) == 1:  # concurrent single enqueues are folded into one statement by the committer
                return await self._write_one(MergeableInsert(_insert_jobs, list(rows), {}))
            # The statements are prepared here, on the event loop: the writer only runs them
            # (docs/decisions.md "The writer runs SQL, the event loop builds").
            statements = _insert_statements(rows)
            return await self._committer.submit(partial(_run_all, statements), len(rows))

        op = partial(_enqueue_op, rows, dedup_until, now, new_queues)
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

    # ------------------------------------------------------------------ queues

    async def load_queues(self) -> list[QueueRecord]:
        """Every persisted queue, by name."""
        rows = await self._committer.submit(partial(_fetch_all, Q["load_queues"], ()))
        return [QueueRecord(name, settings, bool(paused), bool(declared)) for name, settings, paused, declared in rows]

    async def upsert_queue(self, queue: QueueRecord, now: int) -> None:
        """Create or replace a queue row."""
        params = (queue.name, queue.settings_json, int(queue.paused), int(queue.declared), now, now)
        await self._committer.submit(partial(_execute, Q["upsert_queue"], params))

    # ------------------------------------------------------------------ worker side

    async def reserve(self, params: ReserveParams) -> list[JobRecord]:
        """Promote due jobs, then lease up to ``max_jobs`` READY jobs from ``queues`` in order:
        per queue one SELECT of the jobs in reserve order and one UPDATE that leases exactly
        those. Every job of the call gets the same fresh random 128-bit lease id (a lease is
        the pair job id + lease id; docs/decisions.md "One lease id per Reserve call")."""
        now, worker, reserved = params.now, params.worker_id, _RESERVED
        lease_id = os.urandom(16)

        records: list[JobRecord] = []
        for queue, expires, rows in await self._committer.submit(partial(_reserve_op, params, lease_id), 0):
            records.extend(JobRecord(id_, queue, job_type, reserved, priority, run_at, enqueued_at, attempt,
                                     max_attempts, payload, encoding, extras, idem, lease_id, expires, worker, now,
                                     history, None, None, 0, seq)
                           for (id_, job_type, priority, run_at, enqueued_at, attempt, max_attempts, payload,
                                encoding, extras, idem, history, seq) in rows)
        return records

    async def reserve_damaged(self, leases: Sequence[tuple[bytes, bytes]], now: int) -> int:
        """See ``Store.reserve_damaged``: one transaction."""
        return await self._committer.submit(partial(_bury_leased_op, list(leases), now), 0)

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
            return await self._committer.submit(partial(_settle_each, items, policy), len(items))
        now = acks[0].now
        default_keep = policy("").completed_retention
        folded = [p for p in acks if p.now == now]
        # Only what the writer needs crosses to it: the acks as statement parameters (at most
        # _ACK_CHUNK per statement: preparing a VALUES list costs more than linearly in its
        # length, and one statement text is cached per length), the rest by item index.
        statements: list[list[object]] = []
        for start in range(0, len(folded), _ACK_CHUNK):
            chunk_params: list[object] = [now, default_keep]
            for p in folded[start:start + _ACK_CHUNK]:
                chunk_params.append(p.job_id)
                chunk_params.append(p.lease_id)
            statements.append(chunk_params)
        others = {i: p for i, p in enumerate(items) if p.kind is not ack or p.now != now}
        rows, refused, other_results = await self._committer.submit(
            partial(_ack_many, statements, others, now, default_keep, policy), len(items))
        completed = int(State.COMPLETED)
        done = {job_id: _new_result(SettleResult, (None, completed, now, attempt, queue))
                for job_id, queue, attempt in rows}
        done.update(refused)
        return [other_results[i] if i in others else done[p.job_id] for i, p in enumerate(items)]

    async def extend(self, job_id: bytes, lease_id: bytes, now: int, expires_at: int) -> ExtendResult:
        """Push a live lease's expiry to ``expires_at`` (µs)."""

        return await self._committer.submit(partial(_extend_op, job_id, lease_id, now, expires_at))

    # ------------------------------------------------------------------ sweeps

    async def promote_due(self, now: int, limit: int) -> SweepResult:
        """SCHEDULED → READY for due jobs (indexed by run_at); an unprocessable row is skipped
        (``Store.promote_due``)."""
        # Sweeps weigh 0: housekeeping must not count as producer backlog (load shedding).
        return await self._committer.submit(partial(_promote_op, now, limit), 0)

    async def next_due(self) -> int | None:
        """Earliest run_at among SCHEDULED jobs (µs), or None."""
        row = await self._read(Q["next_due"], one=True)
        return None if row is None else row[0]

    async def reclaim_expired(self, now: int, limit: int, policy: PolicyLookup) -> SweepResult:
        """Expired leases → READY, or DEAD_LETTERED with LEASE_EXPIRED on the last attempt."""

        return await self._committer.submit(partial(_reclaim_op, now, limit, policy), 0)

    async def prune(self, now: int, limit: int) -> SweepResult:
        """Delete finished jobs past retention, then expired idempotency keys; an
        unprocessable row is skipped (``Store.prune``)."""

        return await self._committer.submit(partial(_prune_op, now, limit), 0)

    # ------------------------------------------------------------------ reads

    async def get_job(self, job_id: bytes) -> JobRecord | None:
        """One job by id (read connection); a damaged field reads as unset or clamped
        (``storage.rows.repair_job``, logged once per job)."""
        row = await self._read(Q["get_job"], (job_id,), one=True)
        return None if row is None else repair_job(_record(row))

    # ------------------------------------------------------------------ Store protocol: stop, metrics

    def abort(self) -> None:
        """``Store.abort``: the forced stop is ``kill_writer`` (SIGKILL the writer process)."""
        self.kill_writer()

    def figures(self) -> StoreFigures:
        """``Store.figures``: commits (committer + lone-write path) and the commit backlog."""
        return StoreFigures(self.commits, self._committer.backlog)


#: Rows per multi-row INSERT: at most 12 parameters each, far below SQLite's 32,766 limit.
_INSERT_CHUNK = 512
#: JobRow columns that are usually the same for every row of a batch (all but id and
#: payload): bound once per statement when they are.
_SHAREABLE = (1, 2, 3, 4, 5, 6, 7, 9, 10, 11)
#: A multi-row INSERT: (rows, which _SHAREABLE columns are bound once).
_InsertKey = tuple[int, tuple[bool, ...]]
_INSERT_SQL: dict[_InsertKey, str] = {}


def _insert_sql(n: int, shared: tuple[bool, ...] = (False,) * len(_SHAREABLE)) -> str:
    """The INSERT of ``n`` rows with numbered parameters: each column in ``_SHAREABLE``
    whose ``shared`` flag is set is one parameter for all rows (?1, ?2, … in that order);
    every other column has one parameter per row, column after column (all ids, then all
    payloads, …), so the parameter list is the columns of the batch laid end to end."""
    key = (n, shared)
    sql = _INSERT_SQL.get(key)
    if sql is None:
        number = 1
        per_column: dict[int, object] = {}
        for col, same in zip(_SHAREABLE, shared, strict=True):
            if same:
                per_column[col] = number
                number += 1
        first: dict[int, int] = {}
        for col in range(12):
            if col not in per_column:
                first[col] = number
                number += n
        tuples = []
        for i in range(n):
            cells = [f"?{per_column[c]}" if c in per_column else f"?{first[c] + i}" for c in range(12)]
            tuples.append("(" + ", ".join(cells) + ")")
        head = Q["insert_job"].split("VALUES")[0]
        sql = _INSERT_SQL[key] = head + "VALUES " + ", ".join(tuples)
    return sql


def _run_all(statements: list[tuple[_InsertKey | None, Sequence[object]]], conn: sqlite3.Connection) -> Dedups:
    """Run prepared inserts (``_insert_statements``); the empty dedup map of a plain insert."""
    for key, params in statements:
        conn.execute(Q["insert_job"] if key is None else _insert_sql(*key), params)
    return {}


def _insert_jobs(conn: sqlite3.Connection, rows: Sequence[JobRow]) -> None:
    """Insert ``rows`` (see ``_insert_statements``)."""
    _run_all(_insert_statements(rows), conn)


def _insert_statements(rows: Sequence[JobRow]) -> list[tuple[_InsertKey | None, Sequence[object]]]:
    """Insert rows with multi-row INSERTs: one sqlite3_step per chunk instead of one per row,
    so the writer thread gives up and retakes the GIL once per chunk, not once per job
    (with a busy event loop each retake can wait for the interpreter's switch interval).

    Binding parameters holds the GIL; a column with one value for the whole chunk (queue,
    type, state, times, … in a typical batch) is bound once instead of once per row
    (measured: 3.7 → 2.5 µs of writer time per job). The checks and the parameter list
    are C-level list operations on the transposed chunk. Returns (statement key, params)
    pairs: the key is ``_insert_sql``'s arguments, or None for the one-row INSERT; the
    statement text is looked up where the statement runs."""
    out: list[tuple[_InsertKey | None, Sequence[object]]] = []
    for start in range(0, len(rows), _INSERT_CHUNK):
        chunk = rows[start:start + _INSERT_CHUNK]
        n = len(chunk)
        if n == 1:
            out.append((None, chunk[0]))
            continue
        columns = list(zip(*chunk, strict=True))
        shared = tuple(columns[c].count(columns[c][0]) == n for c in _SHAREABLE)
        params: list[object] = [columns[c][0] for c, same in zip(_SHAREABLE, shared, strict=True) if same]
        for c in range(12):
            if c not in _SHAREABLE or not shared[_SHAREABLE.index(c)]:
                params.extend(columns[c])
        out.append(((n, shared), params))
    return out


_ACK_SQL: dict[int, str] = {}
#: Most acks folded into one UPDATE statement (a Settle of more is split).
_ACK_CHUNK = 256


def _ack_sql(n: int) -> str:
    sql = _ACK_SQL.get(n)
    if sql is None:
        values = ", ".join(f"(?{3 + 2 * i}, ?{4 + 2 * i})" for i in range(n))
        sql = _ACK_SQL[n] = Q["ack_many_head"].replace("{values}", values)
    return sql


def _ack_many(statements: list[list[object]], others: dict[int, SettleParams], now: int, default_keep: int,
              policy: PolicyLookup, conn: sqlite3.Connection
              ) -> tuple[list[tuple[bytes, str, int]], dict[bytes, SettleResult], dict[int, SettleResult]]:
    """Writer side of a batched settle, one transaction: run the ack statements (the
    parameters of ``ack_many_head``: now, default retention, then one (job id, lease id)
    pair per ack); give the jobs of a queue with its own completed retention their purge
    time; apply each ack the statements did not complete (refused or repeated) and each of
    ``others`` (nacks, by item index) one by one.

    Returns the completed (job id, queue, attempt), {job id: result} of the acks applied one
    by one, and {item index: result} of ``others``."""
    rows: list[Any] = []
    for params in statements:
        rows += conn.execute(_ack_sql((len(params) - 2) // 2), params).fetchall()
    for queue in {row[1] for row in rows}:
        keep = policy(queue).completed_retention
        if keep != default_keep:
            for _job_id, row_queue, _attempt, seq in rows:
                if row_queue == queue:
                    conn.execute(Q["set_purge_at"], (now + keep, seq))
    acked = {row[0] for row in rows}
    refused: dict[bytes, SettleResult] = {}
    ack = SettleKind.ACK
    for params in statements:
        for k in range(2, len(params), 2):
            job_id, lease_id = params[k], params[k + 1]
            if job_id not in acked:
                assert isinstance(job_id, bytes) and isinstance(lease_id, bytes)
                item = SettleParams(job_id, lease_id, ack, now, outcome="completed")
                refused[job_id] = _settle_one(conn, item, policy)
    return ([(job_id, queue, attempt) for job_id, queue, attempt, _seq in rows], refused,
            {i: _settle_one(conn, p, policy) for i, p in others.items()})


_new_result = tuple.__new__


def _lease_error(row: Sequence[Any] | None, lease_id: bytes, now: int) -> SettleError | None:
    """SPEC §6: unknown job; wrong lease (checked first); right lease but gone."""
    if row is None:
        return SettleError.NOT_FOUND
    _seq, _queue, state, current, expires, *_ = row
    if current != lease_id:
        return SettleError.LEASE_MISMATCH
    if state != _RESERVED or expires is None or expires <= now:
        return SettleError.LEASE_EXPIRED
    return None


def _history_entry(attempt: int, worker: str | None, started: int | None, ended: int, outcome: str,
                   message: str, detail: str) -> str:
    return json.dumps({"attempt": attempt, "worker_id": worker or "", "started_at": started, "ended_at": ended,
                       "outcome": outcome, "error_message": message, "error_detail": detail},
                      separators=(",", ":"))


def _settle_one(conn: sqlite3.Connection, p: SettleParams, policy: PolicyLookup) -> SettleResult:
    row = conn.execute(Q["settle_lookup"], (p.job_id,)).fetchone()
    err = _lease_error(row, p.lease_id, p.now)
    if err is not None:
        # A repeated ack by the lease that completed the job succeeds again (SPEC §6).
        if (err is SettleError.LEASE_EXPIRED and p.kind is SettleKind.ACK and row is not None
                and row[2] == int(State.COMPLETED)):
            return SettleResult(None, int(State.COMPLETED), 0, row[5], row[1])
        return SettleResult(err)
    seq, queue, _state, _lease, _exp, attempt, max_attempts, worker, started, cancel, run_at = row
    pol = policy(queue)
    if p.kind is SettleKind.ACK:
        # Like the batched ack: run_at stays (when it became reservable), history untouched.
        conn.execute(Q["complete_one"], (p.now, p.now + pol.completed_retention, seq))
        return SettleResult(None, int(State.COMPLETED), p.now, attempt, queue)
    outcome = p.outcome or p.kind.value
    entry = _history_entry(attempt, worker, started, p.now, outcome, p.error_message, p.error_detail)
    new: tuple[int, int, int, int | None, int | None, str | None]
    if p.kind is SettleKind.DEAD_LETTER or (p.kind is SettleKind.RETRY and attempt >= max_attempts):
        reason = p.reason if p.kind is SettleKind.DEAD_LETTER else "ATTEMPTS_EXHAUSTED"
        if p.kind is SettleKind.RETRY:  # the history says what happened, not what was asked
            entry = _history_entry(attempt, worker, started, p.now, "attempts_exhausted", p.error_message,
                                   p.error_detail)
        new = (int(State.DEAD_LETTERED), p.now, attempt, p.now, p.now + pol.dead_retention, reason)
    elif p.kind is SettleKind.RELEASE:
        # Given back unprocessed: keeps its run_at, so it keeps its place in the queue.
        new = (_READY, run_at, attempt - 1, None, None, None)
    else:  # RETRY with attempts left
        delay = p.delay if p.delay >= 0 else pol.backoff(attempt, random.uniform(-1.0, 1.0))
        new = (int(State.SCHEDULED) if delay > 0 else _READY, p.now + delay, attempt, None, None, None)
    if cancel and new[0] in (_READY, int(State.SCHEDULED)):
        # An admin asked to cancel this job while it ran (SPEC §1): it does not go back.
        new = (int(State.CANCELLED), new[1], new[2], p.now, p.now + pol.dead_retention, CANCELLED_WHILE_RESERVED)
    conn.execute(Q["settle_update"], (*new, entry, seq))
    return SettleResult(None, new[0], new[1], new[2], queue)


def connect_writer(path: Path, mode: str, cache_mib: int) -> sqlite3.Connection:
    """Open, configure, migrate and write-probe the writer connection of ``path`` (called
    where the writer loop runs: its thread, or the writer process).

    Raises ``StoreCorrupt`` when the file is not a sepp database and ``StoreError``
    when it cannot be written (read-only file, full disk, …).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # Prepared statements kept: multi-row INSERTs and batched acks have one text per batch
    # size (and shared-column mix); re-preparing a 256-row INSERT costs ~2 ms.
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, cached_statements=256)
    except sqlite3.Error as exc:  # e.g. sepp.db is a folder, or the folder cannot be read
        raise StoreError(f"cannot open {path}: {exc}") from exc
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'OFF' if mode == 'async' else 'FULL'}")
        conn.execute(f"PRAGMA cache_size=-{cache_mib * 1024}")
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("PRAGMA foreign_keys=OFF")
        _migrate(conn)
        # SQLite opens a read-only file quietly; find out now, not at the first enqueue.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute(f"PRAGMA user_version={int(version)}")
    except sqlite3.DatabaseError as exc:
        conn.close()
        text = str(exc)
        if "not a database" in text or "malformed" in text:
            raise StoreCorrupt(f"{path} is not a sepp database: {text}") from exc
        raise StoreError(f"cannot use {path}: {text}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    known = migrations(_PKG)
    latest = known[-1][0] if known else 0
    if current > latest:
        raise StoreCorrupt(f"database schema version {current} is newer than this sepp ({latest})")
    for number, _name, sql in known:
        if number <= current:
            continue
        # One script = one transaction: the schema change and the version bump land together.
        conn.executescript(f"BEGIN IMMEDIATE;\n{sql}\n;PRAGMA user_version={number};\nCOMMIT;")


# ---------------------------------------------------------------------- writer-side operations
# Module-level so they pickle (the writer may run in its own process); the connection comes last
# (functools.partial binds the rest).


def _enqueue_op(rows: Sequence[JobRow], dedup_until: Sequence[int], now: int, new_queues: Sequence[QueueRecord],
                conn: sqlite3.Connection) -> Dedups:
    """Writer side of ``SQLiteStore.enqueue`` with idempotency keys or new queues."""
    for q in new_queues:
        conn.execute(Q["insert_queue_if_absent"],
                     (q.name, q.settings_json, int(q.paused), int(q.declared), now, now))
    dedups: Dedups = {}
    fresh: list[JobRow] = []
    for i, row in enumerate(rows):
        key = row.idempotency_key
        if key:
            hit = conn.execute(Q["find_idempotency"], (row.queue, key)).fetchone()
            if hit is not None and hit[1] > now:
                original = hit[0]
                state_row = conn.execute(Q["job_state"], (original,)).fetchone()
                if state_row is not None:
                    state = state_row[0]
                else:  # an earlier row of this call (not inserted yet), or purged: key stays claimed
                    state = next((r.state for r in fresh if r.id == original), 0)
                dedups[i] = (original, state)
                continue
            conn.execute(Q["claim_idempotency"], (row.queue, key, row.id, dedup_until[i]))
        fresh.append(row)
    _insert_jobs(conn, fresh)
    return dedups


def _fetch_all(sql: str, params: Sequence[Any], conn: sqlite3.Connection) -> list[Any]:
    """Run one statement; its rows."""
    return conn.execute(sql, params).fetchall()


def _execute(sql: str, params: Sequence[Any], conn: sqlite3.Connection) -> None:
    """Run one statement."""
    conn.execute(sql, params)


def _reserve_op(params: ReserveParams, lease_id: bytes, conn: sqlite3.Connection) -> list[tuple[str, int, list[Any]]]:
    """Writer side of ``SQLiteStore.reserve``: SQL only; the records are built by the caller
    (docs/decisions.md "The writer runs SQL, the event loop builds"). Per queue with jobs:
    (queue, lease expiry µs, the ready_for_lease rows).

    A row the driver cannot read (a text column that is not UTF-8) or whose payload/history
    is not bytes/text (a damaged row, ``storage.rows``) is not leased: it is dead-lettered
    with ``DAMAGED_ROW`` in the same transaction and the next rows are taken instead
    (issue 14 O4). That check runs only after the plain read failed, off the hot path."""
    now = params.now
    _promote(conn, now, 10_000)  # a row it skips is reported by the promotion sweep
    out: list[tuple[str, int, list[Any]]] = []
    want = params.max_jobs
    budget, used = params.max_bytes, 0
    for queue in params.queues:
        if want <= 0 or (budget and used >= budget):
            break
        for _round in range(_DAMAGED_ROUNDS):
            try:
                rows, size = _ready_rows(conn.execute(Q["ready_for_lease"], (queue, want)), budget, used, bool(out))
                break
            except (sqlite3.OperationalError, TypeError) as exc:
                if isinstance(exc, sqlite3.OperationalError) and not is_decode_error(exc):
                    raise
                _bury_damaged_ready(conn, queue, want, now)  # then read the queue again
        else:
            continue  # a queue full of damaged rows: the next Reserve buries more
        if not rows:
            continue
        used += size
        expires = now + params.lease_for[queue]
        leased = conn.execute(Q["lease_ready"], (lease_id, expires, params.worker_id, now, queue, len(rows))).rowcount
        if leased != len(rows):  # cannot happen with one writer; never hand out an unleased job
            raise StoreError(f"reserve leased {leased} of {len(rows)} selected jobs")
        out.append((queue, expires, rows))
        want -= len(rows)
    return out


#: Times a Reserve re-reads one queue after dead-lettering damaged rows at its head.
_DAMAGED_ROUNDS = 4


def _ready_rows(cur: sqlite3.Cursor, budget: int, used: int, have: bool) -> tuple[list[Any], int]:
    """The ready_for_lease rows to lease and their size in bytes: with a ``budget``, rows
    are read one at a time and past it at most one more job is loaded (the first job of the
    call, ``have`` False, is always taken)."""
    if not budget:
        return cur.fetchall(), 0
    rows: list[Any] = []
    size = 0
    for row in cur:
        n = len(row[7]) + len(row[11] or "")
        if used + size + n > budget and (rows or have):
            break
        rows.append(row)
        size += n
    cur.close()
    return rows, size


def _bury_damaged_ready(conn: sqlite3.Connection, queue: str, want: int, now: int) -> None:
    """Dead-letter (``DAMAGED_ROW``) the damaged rows among the next ``want`` READY jobs of
    ``queue``: text that is not UTF-8, a payload that is not bytes, a history that is not
    text. Each is logged (once per job)."""
    decoder = LenientText()
    saved = conn.text_factory
    conn.text_factory = decoder
    try:
        cur = conn.execute(Q["ready_for_lease"], (queue, want))
        damaged: list[tuple[Any, str]] = []
        while True:
            before = decoder.damaged
            row = cur.fetchone()
            if row is None:
                break
            if decoder.damaged != before:
                damaged.append((row, "a text column is not UTF-8"))
            elif not isinstance(row[7], bytes) or not isinstance(row[11], str | None):
                damaged.append((row, "its payload or history has the wrong type"))
    finally:
        conn.text_factory = saved
    for row, why in damaged:
        conn.execute(Q["bury_damaged"], (now, DAMAGED_ROW, row[12]))
        note_damaged(row[0] if isinstance(row[0], bytes) else row[12],
                     f"job {describe(row)} in queue {clip(repr(queue), 200)} cannot be delivered ({why}): "
                     f"dead-lettered with {DAMAGED_ROW}")


def _bury_leased_op(leases: list[tuple[bytes, bytes]], now: int, conn: sqlite3.Connection) -> int:
    """Writer side of ``SQLiteStore.reserve_damaged``."""
    return sum(conn.execute(Q["bury_leased"], (now, DAMAGED_ROW, job_id, lease_id)).rowcount
               for job_id, lease_id in leases)


def _settle_each(items: Sequence[SettleParams], policy: PolicyLookup, conn: sqlite3.Connection) -> list[SettleResult]:
    """Apply settle items one by one, in request order."""
    return [_settle_one(conn, p, policy) for p in items]


def _extend_op(job_id: bytes, lease_id: bytes, now: int, expires_at: int, conn: sqlite3.Connection) -> ExtendResult:
    """Writer side of ``SQLiteStore.extend``."""
    row = conn.execute(Q["settle_lookup"], (job_id,)).fetchone()
    err = _lease_error(row, lease_id, now)
    if err is not None:
        return ExtendResult(err)
    conn.execute(Q["extend_lease"], (expires_at, row[0]))
    return ExtendResult(None, expires_at, bool(row[9]))


# ---------------------------------------------------------------------- sweeps
# A sweep pass isolates failures (issue 14; docs/decisions.md "Sweeps skip what they cannot
# process"): its rows are first handled as a batch inside a savepoint; when that raises, the
# savepoint is rolled back and every row is handled in a savepoint of its own, so a row that
# cannot be processed is skipped (and reported) and every other row is still handled in the
# same pass. The rows come in index order, one page at a time by key, so a pass goes on past
# the rows it skipped: they are tried again by the next pass but never hold the others back.

#: Rows a pass may skip before it stops (keeps one write transaction short even when a
#: database holds very many unprocessable rows); the next pass starts over from the oldest.
MAX_SKIPPED = 1_000
_INT64_MIN = -(2**63)
_Row = Sequence[Any]


def _error_text(exc: BaseException) -> str:
    """One line saying what went wrong with a row: type and message, at most ~300 bytes."""
    return clip(" ".join(f"{type(exc).__name__}: {exc}".split()), 300)


def _rollback_to(conn: sqlite3.Connection, name: str, exc: BaseException) -> None:
    """Undo a failed savepoint. When SQLite already rolled the whole transaction back (disk
    full, I/O error) the failure is not the row's: ``exc`` is raised and fails the pass."""
    if not conn.in_transaction:
        raise exc
    conn.execute(f"ROLLBACK TO {name}")
    conn.execute(f"RELEASE {name}")


def _each_isolated(conn: sqlite3.Connection, rows: Sequence[_Row], apply: Callable[[sqlite3.Connection, _Row], Any],
                   ) -> tuple[list[tuple[_Row, Any]], list[tuple[_Row, BaseException]]]:
    """``apply(conn, row)`` for every row, in one savepoint; if one raises, everything is rolled
    back and each row is applied in a savepoint of its own. Returns (row, value) of the rows
    applied and (row, exception) of those that failed."""
    conn.execute("SAVEPOINT sweep_batch")
    try:
        done = [(row, apply(conn, row)) for row in rows]
    except Exception as exc:
        _rollback_to(conn, "sweep_batch", exc)
    else:
        conn.execute("RELEASE sweep_batch")
        return done, []
    done = []
    failed: list[tuple[_Row, BaseException]] = []
    for row in rows:
        conn.execute("SAVEPOINT sweep_row")
        try:
            value = apply(conn, row)
        except Exception as exc:
            _rollback_to(conn, "sweep_row", exc)
            failed.append((row, exc))
        else:
            conn.execute("RELEASE sweep_row")
            done.append((row, value))
    return done, failed


def _paged(conn: sqlite3.Connection, sql: str, now: int, limit: int, start: tuple[Any, ...],
           key_of: Callable[[_Row], tuple[Any, ...]], apply: Callable[[sqlite3.Connection, _Row], Any],
           ) -> tuple[list[tuple[_Row, Any]], list[tuple[_Row, BaseException]]]:
    """Apply ``apply`` to up to ``limit`` rows of ``sql`` (parameters: ``now``, the key to
    start after, the page size), isolating failures (``_each_isolated``). After a page with a
    failed row the next page starts after that page's last key, until ``limit`` rows were
    handled, the rows run out, or ``MAX_SKIPPED`` were skipped."""
    done: list[tuple[_Row, Any]] = []
    failed: list[tuple[_Row, BaseException]] = []
    key = start
    while len(done) < limit:
        want = limit - len(done)
        # A text value that is not UTF-8 (a queue name of a damaged row) is read with U+FFFD
        # rather than failing the whole pass (issue 14 O3); the rows are handled by seq.
        rows = fetch_lenient(conn, sql, (now, *key, want))
        page_done, page_failed = _each_isolated(conn, rows, apply)
        done += page_done
        failed += page_failed
        if not page_failed or len(rows) < want or len(failed) >= MAX_SKIPPED:
            break
        key = key_of(rows[-1])
    return done, failed


def _batch_or_rows(conn: sqlite3.Connection, batch: Callable[[], Any]) -> tuple[bool, Any]:
    """Run ``batch()`` (one statement) in a savepoint: (True, its value), or (False, None)
    after rolling it back when it raised (the caller then goes row by row)."""
    conn.execute("SAVEPOINT sweep_stmt")
    try:
        value = batch()
    except Exception as exc:
        _rollback_to(conn, "sweep_stmt", exc)
        return False, None
    conn.execute("RELEASE sweep_stmt")
    return True, value


def _skipped(failed: Sequence[tuple[_Row, BaseException]], id_at: int, queue_at: int,
             key_at: int | None = None) -> tuple[SkippedRow, ...]:
    return tuple(SkippedRow(row[id_at], row[queue_at], _error_text(exc), None if key_at is None else row[key_at])
                 for row, exc in failed)


def _promote_row(conn: sqlite3.Connection, row: _Row) -> None:
    conn.execute(Q["promote_one"], (row[0],))


def _promote(conn: sqlite3.Connection, now: int, limit: int) -> SweepResult:
    """Due SCHEDULED jobs → READY: one statement, or row by row when it fails."""
    ok, rows = _batch_or_rows(conn, lambda: conn.execute(Q["promote_due"], (now, limit)).fetchall())
    if ok:
        return SweepResult(len(rows), frozenset(r[0] for r in rows))
    done, failed = _paged(conn, Q["due_jobs"], now, limit, (_INT64_MIN, 0), lambda r: (r[2], r[0]), _promote_row)
    return SweepResult(len(done), frozenset(row[1] for row, _ in done), {}, _skipped(failed, 3, 1))


def _promote_op(now: int, limit: int, conn: sqlite3.Connection) -> SweepResult:
    """Writer side of ``SQLiteStore.promote_due``."""
    return _promote(conn, now, limit)


def _reclaim_op(now: int, limit: int, policy: PolicyLookup, conn: sqlite3.Connection) -> SweepResult:
    """Writer side of ``SQLiteStore.reclaim_expired``: each expired lease back to READY, or
    CANCELLED (cancel requested) or DEAD_LETTERED (last attempt); failures isolated per row."""

    def reclaim(conn: sqlite3.Connection, row: _Row) -> int:
        seq, queue, attempt, max_attempts, worker, started, expired_at, cancel, _id = row
        entry = _history_entry(attempt, worker, started, expired_at, "lease_expired", "lease expired", "")
        if cancel:  # an admin asked to cancel it while reserved: it does not go back
            conn.execute(Q["settle_update"], (int(State.CANCELLED), expired_at, attempt, now,
                                              now + policy(queue).dead_retention, CANCELLED_WHILE_RESERVED,
                                              entry, seq))
            return int(State.CANCELLED)
        if attempt >= max_attempts:
            purge = now + policy(queue).dead_retention
            conn.execute(Q["settle_update"], (int(State.DEAD_LETTERED), expired_at, attempt, now, purge,
                                              "LEASE_EXPIRED", entry, seq))
            return int(State.DEAD_LETTERED)
        conn.execute("UPDATE jobs SET state = 2, history = json_insert(coalesce(history, '[]'), "
                     "'$[#]', json(?)) WHERE seq = ?", (entry, seq))
        return _READY

    done, failed = _paged(conn, Q["expired_leases"], now, limit, (_INT64_MIN, 0), lambda r: (r[6], r[0]), reclaim)
    woke = set()
    dead: dict[str, int] = {}
    for row, state in done:
        if state == _READY:
            woke.add(row[1])
        elif state == int(State.DEAD_LETTERED):
            dead[row[1]] = dead.get(row[1], 0) + 1
    return SweepResult(len(done), frozenset(woke), dead, _skipped(failed, 8, 1))


def _prune_job(conn: sqlite3.Connection, row: _Row) -> None:
    conn.execute(Q["prune_one"], (row[0],))


def _prune_key(conn: sqlite3.Connection, row: _Row) -> None:
    conn.execute(Q["prune_key"], (row[0], row[1]))


def _prune_op(now: int, limit: int, conn: sqlite3.Connection) -> SweepResult:
    """Writer side of ``SQLiteStore.prune``: one statement for jobs and one for keys, each
    row by row when it fails."""
    skipped: tuple[SkippedRow, ...] = ()
    ok, jobs = _batch_or_rows(conn, lambda: conn.execute(Q["prune_jobs"], (now, limit)).rowcount)
    if not ok:
        done, failed = _paged(conn, Q["purgeable_jobs"], now, limit, (_INT64_MIN, 0), lambda r: (r[2], r[0]),
                              _prune_job)
        jobs, skipped = len(done), _skipped(failed, 3, 1)
    ok, keys = _batch_or_rows(conn, lambda: conn.execute(Q["prune_idempotency"], (now, limit)).rowcount)
    if not ok:
        done, failed = _paged(conn, Q["expired_keys"], now, limit, (_INT64_MIN, "", ""),
                              lambda r: (r[2], r[0], r[1]), _prune_key)
        keys, skipped = len(done), skipped + _skipped(failed, 3, 0, 1)
    return SweepResult(int(jobs + keys), skipped=skipped)
