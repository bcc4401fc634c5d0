"""The lone-write path: a write nobody else is waiting with runs on the event loop itself
(docs/decisions.md "Lone writes
skip the writer hop").

Handing a write to the committer (a pipe to the writer process, or a queue to the writer
thread) and getting the answer back costs two wake-ups of a sleeping thread or process —
measured on the 2-core benchmark VM: 80–170 µs with the writer process, 30–100 µs with the
thread, against ~20 µs for the SQLite work of a one-row insert itself. Group commit only
pays that back when other writes share the commit. So when the committer holds no
operation at all (it is idle: no transaction open, nothing queued), a one-job enqueue runs
here instead, on a second write connection of this process:

* ``BEGIN IMMEDIATE`` / the operation / ``COMMIT`` on the event-loop thread; SQLite's file
  lock serializes it with the committer's connection (WAL mode allows one writer at a time,
  any number of connections). The committer is idle and nothing can be submitted while this
  runs (submits happen on this same thread), so the lock is free; if it is not (``BUSY``),
  nothing was done and the caller falls back to the committer.
* ``async`` mode: the connection runs with ``synchronous=OFF`` like the committer's; the
  committer's background fsync of the WAL covers these commits too (same file).
* ``group`` and ``sync`` modes: the connection runs with ``synchronous=NORMAL`` (the commit
  writes the WAL frames without fsync) and the WAL file is then ``fdatasync``-ed right here
  before the caller is answered — the same durability as ``synchronous=FULL`` (a committed
  WAL frame is durable once the WAL is synced). The sync holds the event loop for its
  ~0.1–0.2 ms; handing it to a thread measured ~55 µs slower per write, and a lone write is
  by definition one nobody else is waiting behind. So that concurrent writers still share
  fsyncs, a write that starts less than ``QUIET_GAP`` after the previous lone write ended is
  not lone: it goes to the committer, which groups it with the others (``quiet``). A lone
  producer's next request arrives a whole client round trip later (≥ 0.3 ms on loopback);
  concurrent requests arrive in the same event-loop pass.

Durability (``group``/``sync``), checked against SQLite's documentation of
``PRAGMA synchronous``: with ``FULL`` "the WAL file is synchronized after each transaction
commit"; with ``NORMAL`` only checkpoints sync (the WAL before, the database after) and the
WAL header is synced when the WAL is reused from its start after a checkpoint. So a
``NORMAL`` commit followed by an ``fdatasync`` of the WAL is what ``FULL`` does (it too uses
``fdatasync`` on Linux, and the WAL needs no sector padding on a powersafe-overwrite file
system). One difference: ``FULL`` syncs before other connections can see the commit, this
path just after — the event loop does nothing in between, so no request can act on the row
first, but a reader thread could read it up to one sync earlier than it is durable.
The descriptor is the WAL file itself (same inode for the store's lifetime): SQLite reuses
the WAL by overwriting it from the start, truncates it in place (``journal_size_limit``,
``wal_checkpoint(TRUNCATE)``), and deletes it only when the last connection closes — this
one included, and it closes the descriptor first. Its directory entry is synced once, when
the descriptor is opened.

Checkpoints never run here: SQLite runs one in whichever connection's commit takes the WAL
past ``wal_autocheckpoint`` pages, and on this connection it would copy pages into the
database and fsync it on the event loop, holding up every request. So this connection has
``wal_autocheckpoint=0``, and after ``MAX_RUN`` lone commits without a commit of the
committer, the next write goes to the committer (``quiet``): its connection checkpoints as
usual (when the WAL is past 1,000 pages), so a long lone-only run keeps the WAL bounded (at
most ~1,000 pages plus ``MAX_RUN`` commits' worth).

If the ``fdatasync`` fails, the write is reported as failed (``StoreError``; it is
committed, but may not survive a crash) and the lone path is switched off for good: later
writes go through the committer, whose commits report storage errors the usual way.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import TypeVar

from sepp.storage.commit_stats import CommitStats
from sepp.storage.errors import StoreError
from sepp.storage.sqlite.committer import Op, as_store_error

T = TypeVar("T")
log = logging.getLogger("sepp.committer")

#: Seconds after a lone write (fsync modes) during which the next write is not lone.
QUIET_GAP = 0.0002

#: Lone commits in a row (no committer commit in between) after which the next write goes
#: to the committer, whose connection checkpoints the WAL (see the module docstring). A
#: one-job insert appends a handful of WAL pages, so 100 keep the WAL within a few MiB; a
#: batch counts as one commit per ``RUN_JOBS`` jobs more (a batch of 256 as 9).
MAX_RUN = 100

#: Jobs of a lone batch that count as one more lone commit towards ``MAX_RUN``.
RUN_JOBS = 32

#: The largest plain batch insert that may run on the lone path (the default
#: ``max_enqueue_batch``): its statements hold the event loop for about a millisecond at most
#: on the benchmark VM, as long as the fsync after it; a larger batch (a raised
#: ``max_enqueue_batch``) goes to the committer.
LONE_MAX_JOBS = 256

#: Seconds after two batch inserts last waited for the committer at once (a producer with
#: several batches in flight) during which no batch takes the lone path
#: (``SQLiteStore._write_batch``).
BATCH_QUIET = 0.1


class LoneBusy(Exception):
    """The write lock was taken (by the committer's connection): nothing was done; submit
    the operation to the committer instead."""


class LoneWriter:
    """A second write connection for lone writes; see the module docstring.

    ``path``: the database file (already created and migrated by the committer).
    ``mode``: the persist mode (``sync`` | ``group`` | ``async``).
    """

    def __init__(self, path: Path, mode: str) -> None:
        self._path = path
        self._wal = path.with_name(path.name + "-wal")
        self._mode = mode
        self._conn: sqlite3.Connection | None = None
        self._wal_fd: int | None = None
        self._ended = 0.0
        self._run = 0  # lone commits since the committer last committed
        self._committer_commits = -1  # the committer's commit count when last seen
        self._broken = False  # an fdatasync failed: no more lone writes
        #: Transactions committed on this path (metrics).
        self.commits = 0
        #: Commit histograms of this path.
        self.stats = CommitStats()

    def open(self) -> None:
        """Open the connection. Raises ``sqlite3.Error`` when the file cannot be opened."""
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, cached_statements=64)
        conn.execute(f"PRAGMA synchronous={'OFF' if self._mode == 'async' else 'NORMAL'}")
        conn.execute("PRAGMA busy_timeout=0")  # never wait for the lock: fall back instead
        conn.execute("PRAGMA wal_autocheckpoint=0")  # the committer checkpoints, never the event loop
        conn.execute("PRAGMA cache_size=-8192")
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA foreign_keys=OFF")
        self._conn = conn

    def close(self) -> None:
        """Close the connection. Idempotent."""
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def quiet(self, committer_commits: int) -> bool:
        """Whether a write may run here now: open and working; fewer than ``MAX_RUN`` lone
        commits since the committer's commit count (``committer_commits``) last changed; and
        (fsync modes) the previous lone write ended at least ``QUIET_GAP`` ago."""
        if committer_commits != self._committer_commits:
            self._committer_commits = committer_commits
            self._run = 0
        return (self._conn is not None and not self._broken and self._run < MAX_RUN
                and (self._mode == "async" or time.perf_counter() - self._ended >= QUIET_GAP))

    def run(self, fn: Op[T], jobs: int = 1) -> T:
        """Run ``fn(conn)`` — a write of ``jobs`` jobs — in one transaction and return its value
        once it is as durable as the persist mode promises (blocking: call on the event loop only
        when ``quiet()`` and the committer is idle).

        Raises ``LoneBusy`` (nothing done) when the write lock is held, ``StoreError`` for an
        SQLite failure (rolled back), or what ``fn`` raises (rolled back).
        """
        conn = self._conn
        assert conn is not None, "open() first"
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise LoneBusy(str(exc)) from exc
        try:
            value = fn(conn)
            started = time.perf_counter()
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise as_store_error(exc) from exc
            raise
        self.commits += 1
        self._run += 1 + jobs // RUN_JOBS
        if self._mode != "async":
            try:
                self._sync_wal()
            finally:
                self._ended = time.perf_counter()
        self.stats.observe(jobs, time.perf_counter() - started)
        return value

    def _sync_wal(self) -> None:
        """fdatasync the WAL. Raises ``StoreError`` when that fails (the write is committed
        but may not survive a crash) and switches the lone path off."""
        try:
            if self._wal_fd is None:
                self._wal_fd = self._open_wal()
            os.fdatasync(self._wal_fd)
        except OSError as exc:
            self._broken = True
            log.error("cannot sync %s: %s; lone writes are off, writes go through the committer", self._wal, exc)
            raise StoreError(f"cannot sync {self._wal}: {exc}") from exc

    def _open_wal(self) -> int:
        """A descriptor of the WAL file (it exists: this connection just committed to it),
        kept until ``close``; its directory entry is synced once here."""
        fd = os.open(self._wal, os.O_RDONLY)
        try:
            folder = os.open(self._wal.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        except BaseException:
            os.close(fd)
            raise
        return fd
