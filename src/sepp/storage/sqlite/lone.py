"""The lone-write path: a write nobody else is waiting with runs on the event loop itself
(issue 15 "A lone request pays for nothing it does not need"; docs/decisions.md "Lone writes
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
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import TypeVar

from sepp.storage.errors import StoreError
from sepp.storage.sqlite.committer import Op, _wrap

T = TypeVar("T")

#: Seconds after a lone write (fsync modes) during which the next write is not lone.
QUIET_GAP = 0.0002


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
        #: Transactions committed on this path (metrics).
        self.commits = 0

    def open(self) -> None:
        """Open the connection. Raises ``sqlite3.Error`` when the file cannot be opened."""
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, cached_statements=64)
        conn.execute(f"PRAGMA synchronous={'OFF' if self._mode == 'async' else 'NORMAL'}")
        conn.execute("PRAGMA busy_timeout=0")  # never wait for the lock: fall back instead
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

    def quiet(self) -> bool:
        """Whether a write may run here now: open, and (fsync modes) the previous lone write
        ended at least ``QUIET_GAP`` ago."""
        return self._conn is not None and (self._mode == "async"
                                           or time.perf_counter() - self._ended >= QUIET_GAP)

    def run(self, fn: Op[T]) -> T:
        """Run ``fn(conn)`` in one transaction and return its value once it is as durable as the
        persist mode promises (blocking: call on the event loop only when ``quiet()`` and the
        committer is idle).

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
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise _wrap(exc) from exc
            raise
        self.commits += 1
        if self._mode != "async":
            try:
                self._sync_wal()
            finally:
                self._ended = time.perf_counter()
        return value

    def _sync_wal(self) -> None:
        """fdatasync the WAL; raises ``StoreError`` when it fails (the write may be lost)."""
        # fdatasync, as SQLite itself syncs the WAL; the descriptor stays open (the WAL file
        # lives as long as any connection to the database, this one included).
        try:
            if self._wal_fd is None:
                self._wal_fd = os.open(self._wal, os.O_RDONLY)
            os.fdatasync(self._wal_fd)
        except OSError as exc:
            raise StoreError(f"cannot sync {self._wal}: {exc}") from exc
