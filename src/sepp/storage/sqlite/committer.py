"""The committer: the single SQLite writer, with group commit (STYLE habit 13).

Writes are submitted from the event loop as *operations* — plain functions of the
connection that run inside a transaction — and awaited. A dedicated thread owns
the writer connection and loops:

* take the first waiting operation (blocking), then, unless the mode is ``sync``,
  every other operation already waiting (up to ``max_group_ops``);
* ``BEGIN IMMEDIATE``, run them all, ``COMMIT`` — one transaction, one fsync
  (``synchronous=FULL``) for the whole group;
* hand every result back to the event loop in one ``call_soon_threadsafe``.

If an operation raises, the group is rolled back and each of its operations is run
again in a transaction of its own, so one bad write never fails its neighbours.
In ``async`` mode the connection runs with ``synchronous=OFF`` (the commit is handed
to the OS) and a background thread fsyncs the WAL and database files every
``fsync_interval`` seconds.

The loop itself is ``GroupLoop``; ``Committer`` runs it in a thread of this process and
``sepp.storage.sqlite.writer_process.ProcessCommitter`` runs the same loop in a child
process of its own (the server's default: docs/decisions.md "The writer in its own
process").
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from sepp.storage.commit_stats import CommitHistograms, CommitStats
from sepp.storage.errors import StoreClosed, StoreError

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], T]
log = logging.getLogger("sepp.committer")


@dataclass(slots=True)
class Pending(Generic[T]):
    """One submitted operation; ``token`` identifies it to whoever waits for it (a future in
    this process, an operation number across the writer-process pipe). ``siblings``: how many
    other operations were in flight (submitted, not yet answered) when it was submitted —
    the group-commit wait only applies when there were some (PostgreSQL's
    ``commit_siblings``)."""

    fn: Op[T]
    token: Any
    weight: int
    siblings: int = 0


#: What the loop hands back per operation: (pending, value, exception).
Results = list[tuple[Pending[Any], Any, BaseException | None]]


class Source(Protocol):
    """Where ``GroupLoop`` takes operations from: ``get`` blocks for the next one,
    ``get_nowait`` raises ``queue.Empty`` when none is waiting (``queue.SimpleQueue`` is one)."""

    def get(self) -> Pending[Any] | object: ...

    def get_nowait(self) -> Pending[Any] | object: ...


#: Put this to make ``GroupLoop.run`` commit what is queued and return.
STOP = object()

#: The group-commit wait only pays off for many small writes (single enqueues); a group
#: already carrying this many jobs (batches) is committed without waiting.
_WAIT_BELOW_JOBS = 128


class MergeableInsert:
    """An operation that only inserts ``rows`` with ``insert(conn, rows)`` and returns
    ``result``. The committer folds all such operations of a group into one ``insert``
    call (one statement), which matters when many single-job enqueues share a commit."""

    __slots__ = ("insert", "result", "rows")

    def __init__(self, insert: Callable[[sqlite3.Connection, list[Any]], None], rows: list[Any],
                 result: Any) -> None:
        self.insert = insert
        self.rows = rows
        self.result = result

    def __call__(self, conn: sqlite3.Connection) -> Any:
        self.insert(conn, self.rows)
        return self.result


class Probe:
    """A readiness probe (``Store.ping``): the loop answers it outside any
    transaction with ``SELECT 1`` on the writer connection — proof that the writer takes
    and answers operations — and counts it as no commit and no committed operation, so
    probes never show in the commit figures. Picklable (it crosses to the writer process)."""

    __slots__ = ()

    def __call__(self, conn: sqlite3.Connection) -> None:
        conn.execute("SELECT 1").fetchone()


class GroupLoop:
    """The writer loop of the module docstring, independent of who waits for the results.

    ``connect`` opens and configures the writer connection (called in the loop's thread).
    ``deliver(results, loop)`` is called from the loop's thread after each group commits
    (or fails), with one (pending, value, exception) entry per operation. Operations go in
    with ``put``; ``put(STOP)`` makes ``run`` commit what is queued and return.

    ``source``: where operations come from (default: a queue fed by ``put``).
    ``mode``: ``sync`` (one operation per commit), ``group`` or ``async``.
    ``max_group_ops``: most operations per transaction. ``group_wait`` (seconds): when the
    previous group held more than one write but fewer than 128 jobs (many small concurrent
    writes) and the next group's first write was submitted while other writes were in
    flight, wait this long before collecting the next group so one fsync covers more
    writes; 0 disables it. A write submitted when no other was in flight (a lone
    producer, or the first write after a burst) is never delayed.
    ``commit_delay`` (seconds): a fault-injection knob for tests of load shedding; 0 in
    production. ``fsync_interval`` (seconds): the ``async`` mode's
    background fsync period.
    """

    def __init__(self, path: Path, mode: str, connect: Callable[[], sqlite3.Connection],
                 deliver: Callable[[Results], None], *, max_group_ops: int = 1024, fsync_interval: float = 0.05,
                 commit_delay: float = 0.0, group_wait: float = 0.004, source: Source | None = None) -> None:
        self._path = path
        self._mode = mode
        self._connect = connect
        self._deliver = deliver
        self._max_group = 1 if mode == "sync" else max_group_ops
        self._fsync_interval = fsync_interval
        self._commit_delay = commit_delay
        self._group_wait = 0.0 if mode == "sync" else group_wait
        self._last_group = 0
        self._last_weight = 0
        self._q: Source = source if source is not None else queue.SimpleQueue()
        self._done = threading.Event()
        #: Commits done and operations committed, for metrics and tests.
        self.commits = 0
        self.ops_committed = 0
        #: Commit histograms, written by this loop's thread.
        self.stats = CommitStats()

    def put(self, item: Pending[Any] | object) -> None:
        """Queue an operation (or ``STOP``); thread-safe. Only with the default source."""
        assert isinstance(self._q, queue.SimpleQueue)
        self._q.put(item)

    def open(self) -> sqlite3.Connection:
        """Open the writer connection (raises what ``connect`` raises)."""
        return self._connect()

    def run(self, conn: sqlite3.Connection) -> None:
        """Commit groups until ``STOP``; then checkpoint and close ``conn``."""
        fsync: threading.Thread | None = None
        if self._mode == "async":
            fsync = threading.Thread(target=self._fsync_loop, name="sepp-fsync", daemon=True)
            fsync.start()
        try:
            while True:
                first = self._q.get()
                if first is STOP:
                    break
                group: list[Pending[Any]] = [first]  # type: ignore[list-item]
                stop_after = False
                if (self._group_wait and self._last_group > 1 and self._last_weight < _WAIT_BELOW_JOBS
                        and first.siblings > 0):  # type: ignore[attr-defined]
                    # Under concurrent load, give the event loop a moment to hand over more
                    # writes so one fsync covers them all (PostgreSQL's commit_delay idea).
                    time.sleep(self._group_wait)
                while len(group) < self._max_group:
                    try:
                        nxt = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is STOP:
                        stop_after = True
                        break
                    group.append(nxt)  # type: ignore[arg-type]
                self._last_group = len(group)
                self._last_weight = sum(item.weight for item in group)
                self._commit_group(conn, group)
                if stop_after:
                    break
            # Drain anything that raced with the stop marker.
            rest: list[Pending[Any]] = []
            while True:
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    break
                if item is not STOP:
                    rest.append(item)  # type: ignore[arg-type]
            if rest:
                self._commit_group(conn, rest)
        finally:
            self._done.set()
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                log.warning("final checkpoint failed", exc_info=True)
            conn.close()
            if fsync is not None:
                fsync.join()

    def _commit_group(self, conn: sqlite3.Connection, group: list[Pending[Any]]) -> None:
        if any(item.fn.__class__ is Probe for item in group):
            probes = [item for item in group if item.fn.__class__ is Probe]
            answers: Results = []
            for item in probes:
                try:
                    answers.append((item, item.fn(conn), None))
                except Exception as exc:
                    answers.append((item, None, as_store_error(exc)))
            self._deliver(answers)
            group = [item for item in group if item.fn.__class__ is not Probe]
            if not group:
                return
        if self._commit_delay:
            time.sleep(self._commit_delay)
        try:
            results = self._transaction(conn, group)
        except Exception:
            if len(group) == 1:
                results = [(group[0], None, as_store_error(_last_exc()))]
            else:
                # Isolate the failure: each operation in its own transaction.
                results = []
                for item in group:
                    try:
                        results.extend(self._transaction(conn, [item]))
                    except Exception as exc:
                        results.append((item, None, as_store_error(exc)))
        self._deliver(results)

    def _transaction(self, conn: sqlite3.Connection, group: list[Pending[Any]]) -> Results:
        jobs = sum(item.weight for item in group)
        conn.execute("BEGIN IMMEDIATE")
        try:
            out: Results = []
            merged = [item for item in group if isinstance(item.fn, MergeableInsert)] if len(group) > 1 else []
            if len(merged) > 1:
                # Many plain inserts (concurrent single enqueues): one statement for all.
                first: MergeableInsert = merged[0].fn  # type: ignore[assignment]
                first.insert(conn, [row for item in merged for row in item.fn.rows])  # type: ignore[attr-defined]
                out.extend((item, item.fn.result, None) for item in merged)  # type: ignore[attr-defined]
                group = [item for item in group if not isinstance(item.fn, MergeableInsert)]
            out.extend((item, item.fn(conn), None) for item in group)
            started = time.perf_counter()
            conn.execute("COMMIT")
            took = time.perf_counter() - started
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.stats.observe(jobs, took)
        self.commits += 1
        self.ops_committed += len(out)
        return out

    def _fsync_loop(self) -> None:
        files = [self._path, self._path.with_name(self._path.name + "-wal")]
        while not self._done.wait(self._fsync_interval):
            for f in files:
                try:
                    fd = os.open(f, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


class Committer:
    """Runs a ``GroupLoop`` in a thread of this process (see the module docstring); the
    arguments are ``GroupLoop``'s. ``submit`` is called on the event loop."""

    def __init__(self, path: Path, mode: str, connect: Callable[[], sqlite3.Connection], *,
                 max_group_ops: int = 1024, fsync_interval: float = 0.05, commit_delay: float = 0.0,
                 group_wait: float = 0.004) -> None:
        self._group = GroupLoop(path, mode, connect, self._deliver, max_group_ops=max_group_ops,
                                fsync_interval=fsync_interval, commit_delay=commit_delay, group_wait=group_wait)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stopped = threading.Event()
        self._ready: asyncio.Future[None] | None = None
        #: Jobs (weights) submitted and not yet resolved. Touched only on the event loop.
        self.backlog = 0
        #: Operations submitted and not yet resolved (whatever their weight).
        self.in_flight = 0

    @property
    def idle(self) -> bool:
        """True when the writer runs and holds no operation (so it holds no transaction)."""
        return self.in_flight == 0 and not self._stopping and self._loop is not None

    @property
    def commits(self) -> int:
        """Commits done (metrics, tests)."""
        return self._group.commits

    @property
    def ops_committed(self) -> int:
        """Operations committed (metrics, tests)."""
        return self._group.ops_committed

    @property
    def stats(self) -> CommitHistograms:
        """The commit histograms so far (``sepp.storage.commit_stats``)."""
        return self._group.stats.snapshot()

    async def start(self) -> None:
        """Open the writer connection in its thread; raises what opening raised."""
        self._loop = asyncio.get_running_loop()
        self._ready = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, name="sepp-committer", daemon=True)
        self._thread.start()
        await self._ready

    def submit(self, fn: Op[T], weight: int = 1) -> asyncio.Future[T]:
        """Queue ``fn`` for the writer; the future resolves after its transaction commits.

        Must be called on the event loop. Raises ``StoreClosed`` once stopping began.
        """
        if self._stopping or self._loop is None:
            raise StoreClosed("the store is closing")
        fut: asyncio.Future[T] = self._loop.create_future()
        self.backlog += weight
        self._group.put(Pending(fn, fut, weight, self.in_flight))
        self.in_flight += 1
        return fut

    async def stop(self) -> None:
        """Commit everything already submitted, then close the connection. Idempotent."""
        if self._thread is None or self._stopping:
            if self._thread is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._stopped.wait)
            return
        self._stopping = True
        self._group.put(STOP)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._stopped.set()

    def _run(self) -> None:
        assert self._loop is not None and self._ready is not None
        try:
            conn = self._group.open()
        except BaseException as exc:  # report the failure to start()
            self._loop.call_soon_threadsafe(_set_exception, self._ready, exc)
            return
        self._loop.call_soon_threadsafe(_set_result, self._ready, None)
        self._group.run(conn)

    def _deliver(self, results: Results) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._resolve, results)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass

    def _resolve(self, results: Results) -> None:
        for item, value, exc in results:
            self.backlog -= item.weight
            self.in_flight -= 1
            resolve(item.token, value, exc)


def resolve(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    """Give ``fut`` the result of its operation: ``exc`` when set, else ``value`` (no-op when
    the waiter already gave up)."""
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def _set_result(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _last_exc() -> BaseException:
    import sys

    exc = sys.exc_info()[1]
    assert exc is not None
    return exc


def as_store_error(exc: BaseException) -> BaseException:
    """``exc`` as the caller of an operation gets it: an ``sqlite3.Error`` as a ``StoreError``
    (``sqlite: …``, the original as its cause), anything else as is."""
    if isinstance(exc, sqlite3.Error):
        err = StoreError(f"sqlite: {exc}")
        err.__cause__ = exc
        return err
    return exc
