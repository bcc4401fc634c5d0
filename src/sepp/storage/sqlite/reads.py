"""``SQLiteReads``: what the SQLite driver's admin, matching and figures modules use of it —
reads on the reader threads and writes through the writer (thread or process) — so that
none of them needs the store itself (the store builds one and hands it out; the import
graph stays a tree).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sepp.storage.rows import fetch_lenient
from sepp.storage.sqlite.committer import Op

T = TypeVar("T")


class Writer(Protocol):
    """The writer of a store (``committer.Committer`` or ``writer_process.ProcessCommitter``)."""

    def submit(self, fn: Op[T], weight: int = 1) -> asyncio.Future[T]:
        """Run ``fn(conn)`` in the writer's next transaction; the future resolves once committed."""
        ...


class SQLiteReads:
    """Read-only connections to the database at ``path``, one per reader thread (two threads;
    WAL lets them read beside the writer), and the store's ``writer``.

    A read raises ``sqlite3.Error`` as SQLite does; a text value that is not UTF-8 (a
    damaged row) reads with U+FFFD instead of failing the read (``rows.fetch_lenient``)."""

    __slots__ = ("_conns", "_local", "_path", "_threads", "_writer")

    def __init__(self, path: Path, writer: Writer) -> None:
        self._path = path
        self._writer = writer
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sepp-reader")
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []

    async def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = (), one: bool = False) -> Any:
        """Run ``sql`` with ``params`` (a sequence or a mapping) on a reader thread: every row
        (a list of tuples), or with ``one`` the first row or None."""
        def run() -> Any:
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, isolation_level=None,
                                       check_same_thread=False)
                conn.execute("PRAGMA busy_timeout=10000")
                self._local.conn = conn
                self._conns.append(conn)
            return fetch_lenient(conn, sql, params, one)

        return await asyncio.get_running_loop().run_in_executor(self._threads, run)

    def submit(self, fn: Op[T], weight: int = 1) -> asyncio.Future[T]:
        """Run the write ``fn(conn)`` (module-level: it may be pickled to the writer process)
        in the writer's next transaction (``weight``: jobs it counts for in the backlog)."""
        return self._writer.submit(fn, weight)

    def close(self) -> None:
        """Wait for the reads in flight, then close every reader connection."""
        self._threads.shutdown(wait=True)
        for conn in self._conns:
            conn.close()
        self._conns.clear()
