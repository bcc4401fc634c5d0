"""Group commit for PostgreSQL: writes waiting at the same moment are
folded into one transaction per writer connection.

The committer owns ``writers`` connections, each run by a task of its own. A task takes
every operation waiting (at most ``max_group_ops``) and runs them in one transaction on its
connection, then commits once; while it commits, new operations gather for the next free
task. So batched and concurrent enqueues do not pay a commit (a WAL flush with
``synchronous_commit = on``) each, and with several connections a slow commit never holds
every write back.

An operation is ``async def op(tx: Tx) -> T``: SQL on ``tx.conn`` inside the transaction,
plus ``tx.wake(queue)`` for each queue it made jobs ready in: one ``pg_notify`` per
transaction tells the other nodes (``listener``), delivered when it commits.

An operation alone in its group may also offer ``run_alone(conn, channel, origin)``: its
work as statements that each commit by themselves, without ``BEGIN`` / ``COMMIT`` (two round
trips fewer; a batched ack or a plain Reserve is one or two statements whose atomicity is
their own). It returns ``(done, result, after)``: ``done`` False (decided before any SQL ran)
sends the operation down the transaction path; ``after`` (or None) is its wake-up, sent
once the callers have their answers (``notifier``). A group of several operations always
runs in one transaction: one commit (one WAL flush) for all of them.

Failures: when one operation of a group raises, the transaction is rolled back and every
operation of the group is run again in a transaction of its own, so one bad operation
fails alone (its caller gets the error) and the others commit. A deadlock or
serialization failure of a lone operation is retried (``RETRIES``). A lost connection
(PostgreSQL down or restarting) fails the group's operations with ``StoreUnavailable``;
the connection is made again for the next group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import asyncpg

from sepp.storage.commit_stats import CommitStats
from sepp.storage.errors import StoreClosed, StoreError, StoreUnavailable

T = TypeVar("T")
log = logging.getLogger("sepp.storage.postgres")

#: Times a lone operation is run again after a deadlock or serialization failure.
RETRIES = 5
#: SQLSTATEs worth retrying: serialization_failure, deadlock_detected.
_RETRY_STATES = frozenset({"40001", "40P01"})


def is_connection_error(exc: BaseException) -> bool:
    """True when ``exc`` means the connection (or the server) is gone, not the statement."""
    # InternalClientError: asyncpg's protocol state broke with the connection (seen while
    # PostgreSQL restarts: "cannot switch to state 15; another operation is in progress").
    # Of class 57 (operator intervention) only the shutdowns are: a cancelled statement
    # (57014, statement_timeout) leaves the connection usable (finding B7).
    return isinstance(exc, OSError | TimeoutError | asyncio.TimeoutError | asyncpg.ConnectionDoesNotExistError
                      | asyncpg.InterfaceError | asyncpg.PostgresConnectionError | asyncpg.InternalClientError
                      | asyncpg.AdminShutdownError | asyncpg.CrashShutdownError | asyncpg.CannotConnectNowError
                      | asyncpg.IdleInTransactionSessionTimeoutError)


def store_error(exc: BaseException) -> StoreError:
    """The storage error for a driver exception: ``StoreUnavailable`` for a lost connection,
    else ``StoreError`` with the server's one-line message."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if is_connection_error(exc):
        return StoreUnavailable(f"PostgreSQL unavailable: {text}")
    return StoreError(f"PostgreSQL: {text}")


class Tx:
    """What an operation gets: ``conn`` (an asyncpg connection inside the group's
    transaction) and ``wake(queue)`` to tell the other nodes jobs became ready there."""

    __slots__ = ("conn", "queues", "ready")

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.ready: set[str] = set()
        self.queues = False

    def wake(self, queue: str) -> None:
        """Jobs of ``queue`` became ready in this transaction (notified at commit)."""
        self.ready.add(queue)

    def queues_changed(self) -> None:
        """A queue row was created, changed or deleted (the other nodes reload theirs)."""
        self.queues = True


Op = Callable[[Tx], Awaitable[T]]


async def notify_in(tx: Tx, channel: str, origin: str) -> None:
    """Tell the other nodes what ``tx`` woke (its ready queues, a queue change) with one
    ``pg_notify`` on ``channel``, delivered when the transaction commits (``listener``);
    nothing when it woke nothing. ``origin`` names this node (it ignores its own)."""
    if tx.ready or tx.queues:
        message: dict[str, Any] = {"o": origin, "q": sorted(tx.ready)}
        if tx.queues:
            message["k"] = 1
        await tx.conn.execute("SELECT pg_notify($1, $2)", channel, json.dumps(message))


def notifier(conn: asyncpg.Connection, channel: str, origin: str, ready: list[str]
             ) -> Callable[[], Awaitable[None]]:
    """The wake-up of an operation that committed by itself (``run_alone``): one ``pg_notify``
    naming the queues in ``ready``, sent by the committer after it answered the callers. Its
    failure is only logged: the work is committed, the notification is a hint (every long
    poll also ends by its own deadline), and a broken connection is found by the next group."""
    payload = json.dumps({"o": origin, "q": ready})

    async def notify() -> None:
        try:
            await conn.execute("SELECT pg_notify($1, $2)", channel, payload)
        except Exception as exc:
            log.warning("committed, but the wake-up notification was not sent: %s: %s", type(exc).__name__, exc)

    return notify


class FoldableOp:
    """An operation whose work can be folded with the others of its kind in a group into one
    statement (plain enqueues: one multi-row INSERT for every producer waiting at that
    moment). ``rows`` is its part; ``run_all(tx, rows)`` does the work of many at once and
    ``__call__`` that of one (when it runs alone). Its result is always ``{}``."""

    __slots__ = ("rows",)

    def __init__(self, rows: Any) -> None:
        self.rows = rows

    @staticmethod
    async def run_all(tx: Tx, rows: list[Any]) -> None:
        """Do the work of every folded operation of a group (their ``rows`` concatenated)."""
        raise NotImplementedError

    @staticmethod
    async def run_autocommit(conn: asyncpg.Connection, rows: list[Any], channel: str, origin: str
                             ) -> tuple[bool, Callable[[], Awaitable[None]] | None]:
        """Do the work of a group made only of such operations as ONE statement outside a
        transaction block (it commits by itself: one round trip instead of three). Returns
        (False, None) when ``rows`` do not fit (then the group runs in a transaction with
        ``run_all``), else (True, ``after``): ``after`` (or None) is what is left once it
        committed — its NOTIFY — which the committer runs after answering the callers."""
        return False, None

    async def __call__(self, tx: Tx) -> dict[Any, Any]:
        await self.run_all(tx, list(self.rows))
        return {}


class _Pending(Generic[T]):
    __slots__ = ("future", "op", "weight")

    def __init__(self, op: Op[T], weight: int, future: asyncio.Future[T]) -> None:
        self.op, self.weight, self.future = op, weight, future


class PgCommitter:
    """Runs write operations in group commits on ``writers`` connections made by ``connect``.

    ``channel`` / ``origin``: the NOTIFY channel of the schema and this node's token
    (payloads are ``{"o": origin, "q": [queues]}`` JSON, plus ``"k": 1`` when queue rows
    changed). ``commit_delay``: seconds slept
    before each commit (a fault-injection knob of the tests, 0 in production).
    """

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]], *, writers: int = 4,
                 channel: str = "sepp", origin: str = "", max_group_ops: int = 256,
                 commit_delay: float = 0.0) -> None:
        self._connect = connect
        self._writers = max(1, writers)
        self._channel = channel
        self._origin = origin
        self._max = max_group_ops
        self._commit_delay = commit_delay
        self._queue: deque[_Pending[Any]] = deque()
        self._work = asyncio.Event()
        self._conns: list[asyncpg.Connection | None] = [None] * self._writers
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._busy = 0
        #: The follow-up of the autocommit group that just committed (``FoldableOp.run_autocommit``).
        self._after: Callable[[], Awaitable[None]] | None = None
        #: Jobs submitted and not yet committed (load shedding; ``Store.backlog``).
        self.backlog = 0
        #: Transactions committed.
        self.commits = 0
        #: Commit histograms (``sepp.storage.commit_stats``).
        self.stats = CommitStats()

    @property
    def idle(self) -> bool:
        """Nothing waiting and nothing running."""
        return not self._queue and not self._busy

    async def start(self) -> None:
        """Make the first writer connection (the others are made when first needed) and
        start the tasks. Raises ``StoreUnavailable`` / ``StoreError`` when it cannot."""
        self._conns[0] = await self._connect()
        self._tasks = [asyncio.create_task(self._run(i), name=f"sepp-pg-writer-{i}") for i in range(self._writers)]

    async def submit(self, op: Op[T], weight: int = 1) -> T:
        """Run ``op`` in the next group commit; its result once committed. ``weight`` counts
        toward ``backlog`` (jobs). Raises ``StoreClosed`` after ``stop()`` began, the
        operation's own ``StoreError``, or ``StoreUnavailable``."""
        if self._closing:
            raise StoreClosed("store is closing")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(op, weight, future))
        self.backlog += weight
        self._work.set()
        return await future

    async def _run(self, index: int) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._work.clear()
                await self._work.wait()
                continue
            group: list[_Pending[Any]] = []
            while self._queue and len(group) < self._max:
                group.append(self._queue.popleft())
            if self._queue:
                self._work.set()  # more waiting: let another writer take it now
            self._busy += 1
            try:
                await self._commit_group(index, group)
            finally:
                self._busy -= 1
                for item in group:
                    self.backlog -= item.weight

    async def _conn(self, index: int) -> asyncpg.Connection:
        conn = self._conns[index]
        if conn is None or conn.is_closed():
            conn = self._conns[index] = await self._connect()
        return conn

    def _drop(self, index: int) -> None:
        conn, self._conns[index] = self._conns[index], None
        if conn is not None:
            conn.terminate()

    async def _commit_group(self, index: int, group: list[_Pending[Any]]) -> None:
        live = [item for item in group if not item.future.done()]
        if not live:
            return
        try:
            conn = await self._conn(index)
        except StoreError as exc:
            for item in live:
                _fail(item, exc)
            return
        try:
            results = await self._transaction(conn, [item.op for item in live], sum(item.weight for item in live))
        except Exception as exc:
            if is_connection_error(exc) or conn.is_closed():
                self._drop(index)
                err = store_error(exc)
                if not isinstance(err, StoreUnavailable):  # the connection broke under another error
                    err = StoreUnavailable(f"PostgreSQL connection lost: {err}")
                for item in live:
                    _fail(item, err)
                return
            if len(live) > 1:
                for item in live:  # one by one: the bad operation fails alone
                    await self._commit_group(index, [item])
                return
            await self._retry_lone(index, live[0], exc)
            return
        for item, result in zip(live, results, strict=True):
            if not item.future.done():
                item.future.set_result(result)
        await self._follow_up()

    async def _follow_up(self) -> None:
        """Run what a committed autocommit group left to do (its NOTIFY), now that its callers
        have their answers; on this writer's connection, before its next group."""
        after, self._after = self._after, None
        if after is not None:
            await after()

    async def _retry_lone(self, index: int, item: _Pending[Any], exc: Exception) -> None:
        for _ in range(RETRIES):
            if getattr(exc, "sqlstate", None) not in _RETRY_STATES:
                break
            try:
                (result,) = await self._transaction(await self._conn(index), [item.op], item.weight)
            except Exception as again:
                if is_connection_error(again):
                    self._drop(index)
                    exc = again
                    break
                exc = again
                continue
            if not item.future.done():
                item.future.set_result(result)
            await self._follow_up()
            return
        _fail(item, exc if isinstance(exc, StoreError) else store_error(exc))

    async def _transaction(self, conn: asyncpg.Connection, ops: list[Op[Any]], jobs: int = 0) -> list[Any]:
        """Run ``ops`` (weighing ``jobs`` jobs) in one commit; the commit is timed into
        ``stats``: the COMMIT round trip, or the whole one-statement autocommit."""
        first = ops[0]
        if (isinstance(first, FoldableOp) and not self._commit_delay
                and all(type(op) is type(first) for op in ops)):
            lone: list[Any] = []
            for op in ops:
                lone.extend(op.rows)  # type: ignore[attr-defined]
            started = time.perf_counter()
            done, after = await first.run_autocommit(conn, lone, self._channel, self._origin)
            if done:
                self.stats.observe(jobs, time.perf_counter() - started)
                self.commits += 1
                self._after = after
                return [{} for _ in ops]
        if len(ops) == 1 and not self._commit_delay:
            alone = getattr(first, "run_alone", None)
            if alone is not None:
                started = time.perf_counter()
                done, result, after = await alone(conn, self._channel, self._origin)
                if done:
                    self.stats.observe(jobs, time.perf_counter() - started)
                    self.commits += 1
                    self._after = after
                    return [result]
        tx = Tx(conn)
        async with conn.transaction():
            folded = [op for op in ops if isinstance(op, FoldableOp)]
            merged = len(folded) > 1
            if merged:
                rows: list[Any] = []
                for op in folded:
                    rows.extend(op.rows)
                await type(folded[0]).run_all(tx, rows)
            # Operations that lock rows by key (``lock_key``: keyed enqueues) run last, in key
            # order, so two groups claiming the same hot keys lock them in the same order and
            # wait for each other instead of deadlocking (finding B6); the others keep their
            # submission order (the sort is stable). Results go back in submission order.
            order = sorted(range(len(ops)), key=lambda i: getattr(ops[i], "lock_key", ("", "")))
            results: list[Any] = [None] * len(ops)
            for i in order:
                op = ops[i]
                results[i] = {} if merged and isinstance(op, FoldableOp) else await op(tx)
            await notify_in(tx, self._channel, self._origin)
            if self._commit_delay:
                await asyncio.sleep(self._commit_delay)
            started = time.perf_counter()
        self.stats.observe(jobs, time.perf_counter() - started)
        self.commits += 1
        return results

    async def stop(self) -> None:
        """Commit everything submitted, then close the connections. Idempotent."""
        self._closing = True
        self._work.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for i, conn in enumerate(self._conns):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), 5)
                self._conns[i] = None

    def kill(self) -> None:
        """Forced stop: drop the connections at once (PostgreSQL rolls back what was in
        flight; nothing committed is lost)."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for i in range(len(self._conns)):
            self._drop(i)


def _fail(item: _Pending[Any], exc: BaseException) -> None:
    if not item.future.done():
        item.future.set_exception(exc)
