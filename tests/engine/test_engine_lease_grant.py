"""A lease runs from when it is granted (docs/decisions.md "A lease runs from when it is
granted"), through the real engine and store with a fake clock.

Found under chaos on PostgreSQL: a Reserve stamped its lease with the time the call came
in, then waited in the node's commit queue while PostgreSQL restarted — the holder was
handed 1.3 s of a 2 s lease, and a job reclaimed while that Reserve waited was leased again
with a window that began before the old holder's ended. Here the commit queue (or the
reserve's own statement) is held while the fake clock moves on, then let go: the holder
gets its whole lease from the moment of the grant, and a lease never starts before the
end of the one it follows.

The writers are held from the test: every writer of the store's committer runs an
operation that waits for the test (``held_writes``), or a session of the test holds a lock
the reserve needs (PostgreSQL). The fake clock cannot reach a writer in a process of its
own (it gets a copy), so the ``sqlite-process`` variant (``CONFORMANCE_ALL=1``) is
deselected at collection (``writer_in_process``, tests/support/servers.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import asyncpg
import pytest
from support.backends import PG_TEST_DSN

from engine.engine_kit import Harness, HarnessFactory, S
from sepp.domain.records import JobRecord
from sepp.domain.states import State

pytestmark = pytest.mark.writer_in_process(reason="the writer reads the fake clock; held from the test")

#: Seconds a test waits for a condition it polls (the writers to be held, a reserve to queue).
PATIENCE = 30.0
#: The lease the reserves here ask for, seconds.
LEASE = 2.0


async def _until(condition: Callable[[], bool] | Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``condition`` every 5 ms until it holds; AssertionError naming ``what`` after PATIENCE s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PATIENCE
    while loop.time() < deadline:
        got = condition()
        if got if isinstance(got, bool) else await got:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"not within {PATIENCE:g} s: {what}")


def _hold_sqlite(entered: threading.Event, gate: threading.Event, conn: Any) -> None:
    """A writer operation (runs in the writer thread, inside its transaction) that keeps
    the writer until ``gate`` is set."""
    entered.set()
    if not gate.wait(PATIENCE):
        raise AssertionError("the test never let the writer go")


@asynccontextmanager
async def held_writes(h: Harness) -> AsyncIterator[Callable[[], int]]:
    """Every writer of ``h.store`` busy in an operation that waits until the block ends, so
    what is submitted meanwhile waits in the commit queue (as it does while PostgreSQL
    restarts). Yields a function giving how many operations wait behind the holders."""
    committer: Any = h.store.committer  # type: ignore[attr-defined]
    if h.store.shared:  # PostgreSQL: one holding operation per writer connection
        gate = asyncio.Event()
        holders: list[asyncio.Future[Any]] = []
        for _ in range(committer._writers):
            entered = asyncio.Event()

            async def hold(tx: Any, entered: asyncio.Event = entered) -> None:
                entered.set()
                await asyncio.wait_for(gate.wait(), PATIENCE)

            holders.append(asyncio.ensure_future(committer.submit(hold)))
            await asyncio.wait_for(entered.wait(), PATIENCE)  # taken by a writer of its own
        try:
            yield lambda: len(committer._queue)
        finally:
            gate.set()
            await asyncio.gather(*holders)
        return
    assert hasattr(committer, "in_flight"), "a writer in a process of its own: deselected by writer_in_process"
    thread_gate, thread_entered = threading.Event(), threading.Event()
    holder = committer.submit(partial(_hold_sqlite, thread_entered, thread_gate), 0)
    try:
        assert await asyncio.to_thread(thread_entered.wait, PATIENCE)
        yield lambda: int(committer.in_flight) - 1
    finally:
        thread_gate.set()
        await holder


async def _reserve_held(h: Harness, stall_s: float, worker: str = "w") -> list[JobRecord]:
    """A reserve (``LEASE`` s) of queue ``q`` that comes in now, then waits ``stall_s`` fake
    seconds in the held commit queue before it runs."""
    async with held_writes(h) as waiting:
        reserving = asyncio.ensure_future(h.engine.reserve(["q"], 1, LEASE, 0.0, worker))
        await _until(lambda: waiting() >= 1, "the reserve waits in the commit queue")
        h.clock.advance(stall_s)
        assert not reserving.done()
    return await reserving


async def test_a_reserve_held_in_the_commit_queue_gets_its_whole_lease_from_the_grant(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue(max_attempts=3)
    came = h.now
    (job,) = await _reserve_held(h, 5.0)  # longer than the lease it asked for
    granted = came + 5 * S
    assert (job.started_at, job.lease_expires_at) == (granted, granted + 2 * S)
    stored = await h.job(job_id)
    assert (stored.state, stored.started_at, stored.lease_expires_at) == (int(State.RESERVED), granted,
                                                                          granted + 2 * S)
    # The whole lease is the holder's: nothing reclaims it before its end, and an ack a
    # microsecond before the end is taken.
    h.clock.advance(us=2 * S - 1)
    assert await h.sweeper.reclaim_once() == 0
    assert (await h.ack(job)).state == State.COMPLETED


async def test_the_lease_after_an_expiry_starts_at_or_after_the_end_of_the_one_before(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue(max_attempts=3)
    (first,) = await _reserve_held(h, 3.0)
    assert first.lease_expires_at == first.started_at + 2 * S  # type: ignore[operator]
    h.clock.advance(LEASE)
    assert await h.sweeper.reclaim_once() == 1
    (second,) = await _reserve_held(h, 0.25, worker="w2")
    assert second.id == job_id and second.attempt == 2
    assert first.lease_expires_at is not None and second.started_at is not None
    assert second.started_at >= first.lease_expires_at
    assert (second.started_at, second.lease_expires_at) == (first.lease_expires_at + S // 4,
                                                            first.lease_expires_at + S // 4 + 2 * S)


async def test_an_extension_held_in_the_commit_queue_runs_its_whole_length_from_when_it_is_written(
        harness: Harness) -> None:
    h = harness
    await h.enqueue()
    (job,) = await h.reserve(lease_s=LEASE)
    assert job.lease_id is not None
    h.clock.advance(0.5)
    async with held_writes(h) as waiting:
        extending = asyncio.ensure_future(h.engine.extend(job.id, job.lease_id, 3.0))
        await _until(lambda: waiting() >= 1, "the extension waits in the commit queue")
        h.clock.advance(1.0)  # still within the lease it extends
    result = await extending
    assert result.error is None and result.lease_expires_at == h.now + 3 * S
    assert (await h.job(job.id)).lease_expires_at == h.now + 3 * S


#: Sessions waiting for session $1 (directly or through one that waits for it).
_WAITING = """WITH w AS (SELECT pid, pg_blocking_pids(pid) AS b FROM pg_stat_activity)
SELECT count(*) FROM w WHERE $1 = ANY(b) OR b && ARRAY(SELECT pid FROM w WHERE $1 = ANY(b))"""


@asynccontextmanager
async def _waited_for(holder: asyncpg.Connection) -> AsyncIterator[Callable[[], Awaitable[bool]]]:
    """A function telling whether some session waits for ``holder``'s (polled from a session
    of its own: inside a transaction ``pg_stat_activity`` is read once)."""
    watcher = await asyncpg.connect(PG_TEST_DSN)
    pid = holder.get_server_pid()

    async def waiting() -> bool:
        return bool(await watcher.fetchval(_WAITING, pid))

    try:
        yield waiting
    finally:
        await watcher.close()


@pytest.mark.postgres_only(reason="a reclaim on another writer connection while a reserve waits for a lock")
async def test_a_reserve_waiting_for_a_lock_never_leases_into_a_reclaimed_lease(
        make_harness: HarnessFactory) -> None:
    # A reserve of a queue with max_in_flight takes the queue's flow lock in its promotion
    # statement. A session of the test holds that lock: the reserve waits there, on one
    # writer connection, while the first lease ends and a reclaim runs on another.
    h = await make_harness(queues={"q": {"max_in_flight": 10}})
    schema = h.store.schema  # type: ignore[attr-defined]
    job_id, _ = await h.enqueue(max_attempts=3)
    (first,) = await h.reserve(lease_s=LEASE)
    assert first.lease_expires_at == h.now + 2 * S
    h.clock.advance(1.0)  # the first holder has 1 s left when the next reserve comes in
    holder = await asyncpg.connect(PG_TEST_DSN)
    try:
        key = f"sepp.flow/{schema}/q"
        await holder.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", key)
        async with _waited_for(holder) as waiting:
            reserving = asyncio.ensure_future(h.engine.reserve(["q"], 1, LEASE, 0.0, "w2"))
            await _until(waiting, "the reserve waits for the flow lock")
            h.clock.advance(1.5)  # the first lease ended 0.5 s ago
            assert await h.sweeper.reclaim_once() == 1
            await holder.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
        (second,) = await reserving
    finally:
        await holder.close()
    assert (second.id, second.attempt) == (job_id, 2)
    assert first.lease_expires_at is not None and second.started_at is not None
    assert second.started_at >= first.lease_expires_at  # no two windows overlap
    assert (second.started_at, second.lease_expires_at) == (h.now, h.now + 2 * S)


@pytest.mark.postgres_only(reason="a reclaim on another writer connection while a reserve writes its leases")
async def test_no_reclaim_frees_a_lease_ending_after_the_grant_of_a_reserve_writing_its_leases(
        make_harness: HarnessFactory) -> None:
    # A reserve of queues a then b: it reads its grant time, then waits for the token
    # bucket of a (rate-limited), whose row a session of the test holds; meanwhile b's
    # lease ends and a reclaim pass runs on another writer connection. Had the reclaim freed
    # it, the reserve would lease b's job with a window starting before the old one ended.
    h = await make_harness(queues={"a": {"rate_limit": "100/s"}, "b": {}})
    schema = h.store.schema  # type: ignore[attr-defined]
    assert await h.engine.reserve(["a"], 1, LEASE, 0.0, "w") == []  # makes a's token bucket
    job_id, _ = await h.enqueue("b", max_attempts=3)
    (first,) = await h.reserve("b", lease_s=LEASE)
    assert first.lease_expires_at is not None
    h.clock.advance(1.0)
    came = h.now
    holder = await asyncpg.connect(PG_TEST_DSN)
    try:
        async with holder.transaction(), _waited_for(holder) as waiting:
            await holder.execute(f"SELECT 1 FROM {schema}.flow_buckets WHERE queue = 'a' FOR UPDATE")
            reserving = asyncio.ensure_future(h.engine.reserve(["a", "b"], 1, LEASE, 0.0, "w2"))
            await _until(waiting, "the reserve waits for a's token bucket")
            h.clock.advance(1.5)  # b's lease ended 0.5 s ago, after the reserve's grant time
            assert await h.sweeper.reclaim_once() == 0  # not past the grant time of the reserve
        assert await reserving == []  # b's job was still leased when the reserve was granted
    finally:
        await holder.close()
    assert came < first.lease_expires_at
    assert await h.sweeper.reclaim_once() == 1  # once that reserve is done
    (second,) = await h.engine.reserve(["a", "b"], 1, LEASE, 0.0, "w2")
    assert (second.id, second.attempt) == (job_id, 2)
    assert second.started_at is not None and second.started_at >= first.lease_expires_at
    assert (second.started_at, second.lease_expires_at) == (h.now, h.now + 2 * S)
