"""A worker's stop against a server that is frozen (SIGSTOP: its sockets stay open, nothing
answers — a process paused by a debugger, a VM stalled) and against one that restarts while
the worker stops.

* Frozen during a ``Reserve`` long-poll: ``StopReserving`` goes unanswered, the call is
  cancelled after ``RESERVE_STOP_TIMEOUT`` and the stop ends then.
* Frozen with jobs running: their acks hang (no transport error, so no re-send and no hurry
  shortcut); the stop gives them up ``SETTLE_STOP_TIMEOUT`` after the handlers and ends,
  lease extensions in flight to the frozen server included — within
  ``shutdown_grace + SETTLE_STOP_TIMEOUT`` plus slack.
* Restarted while the stop waits for its acks: the acks are re-sent to the server once it is
  back, they land (nothing given up) and the job ends COMPLETED, none RESERVED.
* A server that answers with errors of its own (its PostgreSQL gone): the ack is re-sent at
  the backed-off pace, not in a busy loop (7 tries in 6 s, 0.02 s of CPU, in one run).

The timeouts are monkeypatched down (the mechanism, not the 5 s / 10 s values). Every server
is a real ``sepp serve`` process; the frozen one is let go (SIGCONT) before its teardown.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from support.servers import ServerFactory
from support.worker import Gate, enqueue_one, fast_queue, pinned_server, until

from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess
from sepp.worker import JobReport, Worker, _shutdown

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.slow,
]

#: The stop tests are backend-neutral (the worker's stop, not the storage).
neutral = pytest.mark.sqlite_only(reason="backend-neutral: the worker's stop, not the storage")

#: Seconds a stop may overrun its bound on a loaded machine (the rest is milliseconds on a
#: quiet one). What the tests rule out is far longer: the 20 s long poll waited out, the
#: settler's 60 s re-send window.
SLACK = 5.0


@contextmanager
def frozen(server: ServerProcess) -> Iterator[None]:
    """``server`` stopped with SIGSTOP for the block, then continued."""
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


def _reserve_seen(target: str, worker_id: str) -> bool:
    """Whether the server behind ``target`` lists ``worker_id`` with a ``Reserve`` received."""
    with AdminClient(target) as admin:
        return any(w.worker_id == worker_id and w.last_reserve.seconds for w in admin.list_workers().workers)


@neutral
async def test_a_stop_during_a_long_poll_to_a_frozen_server_ends_after_the_reserve_timeout(
        server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shutdown, "RESERVE_STOP_TIMEOUT", 2.0)
    server = pinned_server(server_factory)
    worker = Worker(server.grpc_target, ["q"], concurrency=2, prefetch=0, shutdown_grace=1.0, poll_wait=20.0)
    worker.register("t", lambda job: None)
    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(lambda: "_reserver" in vars(worker) and worker._reserver.calls, 10, "a long poll open")
    # the call object exists before its connection does: wait until the server has the
    # Reserve (a freeze before the handshake makes the stop quick, rightly: nothing is open)
    await until(lambda: _reserve_seen(server.grpc_target, worker.config.worker_id), 10, "the Reserve at the server")
    with frozen(server):
        t0 = time.monotonic()
        await asyncio.wait_for(worker.stop(), 30)
        took = time.monotonic() - t0
        await asyncio.wait_for(run, 5)
    assert 2.0 - 0.1 <= took < 2.0 + SLACK, took


@neutral
async def test_a_stop_with_acks_to_a_frozen_server_ends_within_grace_and_the_settle_timeout(
        server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shutdown, "SETTLE_STOP_TIMEOUT", 3.0)
    monkeypatch.setattr(_shutdown, "RESERVE_STOP_TIMEOUT", 1.0)
    server = pinned_server(server_factory)
    gate = Gate()
    reports: list[JobReport] = []

    # 2 s leases: extensions go out every second or so, so some are in flight to the frozen server
    worker = Worker(server.grpc_target, ["q"], concurrency=4, prefetch=0, shutdown_grace=2.0, lease_duration=2.0)
    worker.on_outcome(reports.append)
    worker.register("t", gate.handler)
    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    for _ in range(4):
        await enqueue_one(server.grpc_target)
    await until(lambda: gate.started == 4, 10, "4 jobs running")
    with frozen(server):
        await asyncio.sleep(1.5)  # let extensions go out to the frozen server
        t0 = time.monotonic()
        stop = asyncio.create_task(worker.stop())
        await asyncio.sleep(0.5)
        gate.open()  # the handlers end within the grace; their acks hang
        await asyncio.wait_for(stop, 30)
        took = time.monotonic() - t0
        await asyncio.wait_for(run, 5)
    assert took < 0.5 + 3.0 + SLACK, took
    assert [r.refused.split(":")[0] for r in reports] == ["Abandoned"] * 4


@neutral
async def test_acks_waiting_at_stop_land_once_the_server_is_back(server_factory: ServerFactory,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shutdown, "SETTLE_STOP_TIMEOUT", 20.0)
    server = pinned_server(server_factory)
    gate = Gate()
    reports: list[JobReport] = []

    worker = Worker(server.grpc_target, ["q"], concurrency=4, prefetch=0, shutdown_grace=10.0)
    worker.on_outcome(reports.append)
    worker.register("t", gate.handler)
    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    for _ in range(4):
        await enqueue_one(server.grpc_target)
    await until(lambda: gate.started == 4, 10, "4 jobs running")
    await asyncio.to_thread(server.kill)
    stop = asyncio.create_task(worker.stop())
    gate.open()
    await until(lambda: worker._settler._retrying, 10, "acks being re-sent")
    await asyncio.to_thread(server.start)
    await asyncio.wait_for(stop, 25)
    await asyncio.wait_for(run, 5)
    assert sorted((r.outcome, r.refused) for r in reports) == [("completed", "")] * 4, reports
    with AdminClient(server.grpc_target) as admin:
        (s,) = admin.queue_stats(["q"])
    assert (s.reserved, s.completed) == (0, 4)


@pytest.mark.postgres_only(reason="the server's database goes away: PostgreSQL behind a proxy that is closed")
async def test_a_server_answering_errors_is_tried_at_a_backed_off_pace(server_factory: ServerFactory) -> None:
    """A server that answers every ``Settle`` and ``Reserve`` with an error of its own (its
    database is gone: UNAVAILABLE at once, on a connected channel) is not hammered: the
    worker's ack is re-sent with its pause doubling to ``RETRY_PAUSE_MAX`` (no try comes
    early because the channel is connected), and the worker's process spends little CPU."""
    import resource
    from urllib.parse import urlsplit, urlunsplit

    from support.backends import PG_TEST_DSN
    from support.proxy import PausableProxy

    parts = urlsplit(PG_TEST_DSN)
    proxy = PausableProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    user = f"{parts.username}@" if parts.username else ""
    try:
        server = server_factory(postgres_dsn=urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}")),
                                queues={"q": fast_queue(lease_duration=60.0)})
        gate = Gate()

        worker = Worker(server.grpc_target, ["q"], concurrency=1, prefetch=0, shutdown_grace=1.0)
        worker.register("t", gate.handler)
        run = asyncio.create_task(worker.run(install_signal_handlers=False))
        await enqueue_one(server.grpc_target)
        await until(lambda: gate.started == 1, 10, "the job running")
        proxy.close()   # the database is gone: the server answers with errors
        gate.open()
        await until(lambda: worker._settler._retrying, 10, "the ack being re-sent")
        calls, cpu = worker._settler.calls, resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.sleep(6.0)   # the window measured
        tries = worker._settler.calls - calls
        after = resource.getrusage(resource.RUSAGE_SELF)
        used = (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)
        await asyncio.wait_for(worker.stop(0), 10)
        await asyncio.wait_for(run, 5)
    finally:
        proxy.close()
    # 0.05 s doubling to 2 s: at most ~8 tries in 6 s wherever the window starts; a busy loop is hundreds
    assert tries <= 10, tries
    assert used < 1.5, used
