"""``StopReserving``: a stopping worker asks the server to end its long-polls
instead of cancelling a ``Reserve`` that may already be answered.

Engine level (the real engine and store, no process): a parked ``reserve`` of worker W
answers ``[]`` at once after ``stop_reserving(W)`` and leases nothing more; one inside the
store's lease answers its jobs; another worker's call stays parked; no open call → 0; an
empty id is refused. Then the ``Worker`` runtime against an in-process gRPC server over the
same engine: its stop is answered (never cancelled) on a current server, falls back to the
cancel after ``RESERVE_STOP_WAIT`` on an older one (no ``StopReserving``), repeats the call
while a Reserve is open, awaits a call the answering server does not stop to the end of its
long-poll (a cancel could cross an answer already sent: its jobs would stay RESERVED), and
cancels only once ``StopReserving`` went unanswered for ``RESERVE_STOP_TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from support.worker import until

from engine.engine_kit import Harness, request
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.ids import job_id_bytes
from sepp.domain.states import State
from sepp.server.admin import AdminEngine
from sepp.server.engine import JobEngine
from sepp.server.errors import InvalidRequest
from sepp.server.parts import ServerParts
from sepp.server.rpc.registration import register
from sepp.server.rpc.worker import WorkerServicer
from sepp.worker import Job, Worker, _shutdown

WORKER_SERVICE = wpb.DESCRIPTOR.services_by_name["WorkerService"]


def reserve(h: Harness, worker_id: str, *, wait: float = 30.0, n: int = 5) -> asyncio.Task[Any]:
    """A long-polling ``engine.reserve`` of queue ``q`` as a task."""
    return asyncio.create_task(h.engine.reserve(["q"], n, 60.0, wait, worker_id))


# ---------------------------------------------------------------- the engine


async def test_a_parked_reserve_answers_empty_at_once_and_leases_nothing_more(harness: Harness) -> None:
    h = harness
    await h.enqueue("q")  # the queue exists; its one job is taken first
    (taken,) = await h.reserve()
    call = reserve(h, "W")
    await until(lambda: h.engine.parked("W") == 1, what="the reserve to park")
    assert h.engine.stop_reserving("W") == 1
    job_id, _ = await h.enqueue("q")  # wakes the long-poll again: it must not lease this job
    assert await asyncio.wait_for(call, 10.0) == []
    assert (await h.job(job_id)).state == State.READY
    assert h.engine.parked("W") == 0 and h.engine.stop_reserving("W") == 0  # nothing open any more
    assert (await h.ack(taken)).state == State.COMPLETED


async def test_a_reserve_stopped_while_leasing_answers_its_jobs(harness: Harness) -> None:
    h = harness
    ids = {(await h.enqueue("q"))[0] for _ in range(3)}
    call = reserve(h, "W")
    await asyncio.sleep(0)  # the call's first step ran: it is inside the store's lease now
    assert h.engine.parked("W") == 0
    assert h.engine.stop_reserving("W") == 1
    got = await asyncio.wait_for(call, 5.0)
    assert {j.id for j in got} == ids  # leased, so answered: the worker gives them back
    assert {(await h.job(i)).state for i in ids} == {State.RESERVED}


async def test_only_the_named_workers_reserves_are_stopped(harness: Harness) -> None:
    h = harness
    await h.enqueue("q")
    await h.reserve()
    mine, mine_too, other = reserve(h, "W"), reserve(h, "W"), reserve(h, "X")
    await until(lambda: h.engine.parked("W") == 2 and h.engine.parked("X") == 1, what="three parked reserves")
    assert h.engine.stop_reserving("W") == 2
    assert h.engine.stop_reserving("W") == 0  # idempotent: both are stopped already
    assert [await asyncio.wait_for(call, 10.0) for call in (mine, mine_too)] == [[], []]
    assert not other.done() and h.engine.parked("X") == 1
    job_id, _ = await h.enqueue("q")  # the other worker's call still long-polls, and gets it
    assert [j.id for j in await asyncio.wait_for(other, 5.0)] == [job_id]


async def test_stop_reserving_with_no_open_reserve_wakes_none_and_an_empty_id_is_refused(harness: Harness) -> None:
    h = harness
    assert h.engine.stop_reserving("nobody") == 0
    assert await h.engine.reserve(["q"], 1, None, 0.0, "W") == []  # ended: forgotten
    assert h.engine.stop_reserving("W") == 0
    with pytest.raises(InvalidRequest) as refused:
        h.engine.stop_reserving("")
    assert refused.value.field == "worker_id"


async def test_end_long_polls_answers_every_parked_reserve_and_no_later_one_waits(harness: Harness) -> None:
    """The server is stopping (``SeppServer.stop``): every parked call answers ``[]`` at once,
    with or without a worker id; a later call does not wait, but still leases what is ready."""
    h = harness
    await h.enqueue("q")
    (taken,) = await h.reserve()
    named, anonymous = reserve(h, "W"), reserve(h, "")
    await until(lambda: h.engine.parked() == 2, what="two parked reserves")
    assert h.engine.end_long_polls() == 2
    assert [await asyncio.wait_for(call, 10.0) for call in (named, anonymous)] == [[], []]
    assert h.engine.parked() == 0 and h.engine.end_long_polls() == 0  # nothing open: idempotent
    assert await asyncio.wait_for(h.engine.reserve(["q"], 1, 60.0, 30.0, "W"), 10.0) == []  # no wait
    job_id, _ = await h.enqueue("q")
    assert [j.id for j in await asyncio.wait_for(h.engine.reserve(["q"], 1, 60.0, 30.0, "W"), 5.0)] == [job_id]
    assert (await h.ack(taken)).state == State.COMPLETED


# ---------------------------------------------------------------- the Worker against it


class CountingServicer(WorkerServicer):
    """The real servicer, counting ``StopReserving`` calls; ``stops=False`` answers them with
    0 without stopping anything (a node that does not hold the worker's calls);
    ``fails=True`` answers UNAVAILABLE (the server unreachable, as the worker sees it)."""

    def __init__(self, parts: ServerParts, engine: JobEngine, *, stops: bool = True, fails: bool = False) -> None:
        super().__init__(parts, engine)
        self.stops = stops
        self.fails = fails
        self.stop_calls = 0

    async def StopReserving(self, request: wpb.StopReservingRequest, context: Any) -> wpb.StopReservingResponse:
        self.stop_calls += 1
        if self.fails:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "unreachable (test)")
        if not self.stops:
            return wpb.StopReservingResponse(woken=0)
        return await super().StopReserving(request, context)


@asynccontextmanager
async def serving(engine: JobEngine, servicer: WorkerServicer, *, methods: tuple[str, ...] | None = None,
                  ) -> AsyncIterator[str]:
    """An in-process gRPC server with ``servicer`` for the worker service (only ``methods``
    when given: an older server); yields its target."""
    server = grpc.aio.server()
    service: Any = WORKER_SERVICE
    if methods is not None:
        service = SimpleNamespace(full_name=WORKER_SERVICE.full_name,
                                  methods=[m for m in WORKER_SERVICE.methods if m.name in methods])
    register(server, service, servicer)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)
        await engine.quiesce()


async def stop_parked_worker(target: str, engine: JobEngine, poll_wait: float = 20.0) -> tuple[Worker, float]:
    """Run a worker on ``q`` (empty) with a ``poll_wait`` s long-poll until the server holds
    its call parked, then stop it; the worker and the stop's duration (seconds)."""
    worker = Worker(target, ["q"], poll_wait=poll_wait, worker_id="W", token="")

    @worker.handler("t")
    async def t(job: Job) -> None:
        pass

    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(lambda: engine.parked("W") >= 1, what="the worker's reserve to park")
    t0 = time.monotonic()
    await worker.stop(5.0)
    await asyncio.wait_for(run, 10)
    return worker, time.monotonic() - t0


async def harness_with_queue(h: Harness) -> None:
    """Queue ``q`` exists and is empty."""
    await h.enqueue("q")
    (job,) = await h.reserve()
    await h.ack(job)


async def test_the_worker_stops_a_parked_reserve_by_asking_not_by_cancelling(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shutdown, "RESERVE_STOP_TIMEOUT", 15.0)  # far from "at once" on a loaded machine
    h = harness
    await harness_with_queue(h)
    servicer = CountingServicer(h.parts, h.engine)
    async with serving(h.engine, servicer) as target:
        worker, took = await stop_parked_worker(target, h.engine)
    assert worker.stats["reserve_calls"] == 1  # the parked call was answered (empty), not cancelled
    assert servicer.stop_calls >= 2  # the stop's first, and its last one: the session is over
    assert took < _shutdown.RESERVE_STOP_TIMEOUT / 2, took
    stopped = {r.worker_id: r.stopped_at for r in h.parts.workers.snapshot("n")}
    assert stopped["W"] == h.now  # the Workers page lists it stopped, not live


async def test_against_an_older_server_the_worker_cancels_after_reserve_stop_wait(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shutdown, "RESERVE_STOP_TIMEOUT", 15.0)  # far from RESERVE_STOP_WAIT on a loaded machine
    h = harness
    await harness_with_queue(h)
    older = ("Reserve", "Ack", "Nack", "ExtendLease", "Settle")  # no StopReserving: UNIMPLEMENTED
    async with serving(h.engine, WorkerServicer(h.parts, h.engine), methods=older) as target:
        worker, took = await stop_parked_worker(target, h.engine)
    assert worker.stats["reserve_calls"] == 0  # cancelled while parked
    assert _shutdown.RESERVE_STOP_WAIT <= took < _shutdown.RESERVE_STOP_TIMEOUT / 2, took


async def test_stop_reserving_is_repeated_and_a_call_the_server_does_not_stop_ends_by_itself(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    await harness_with_queue(h)
    monkeypatch.setattr(_shutdown, "RESERVE_STOP_TIMEOUT", 0.6)
    servicer = CountingServicer(h.parts, h.engine, stops=False)  # answers 0: the call stays parked
    async with serving(h.engine, servicer) as target:
        worker, took = await stop_parked_worker(target, h.engine, poll_wait=2.0)
    # The server answers, so the call is never cancelled (a cancel may cross an answer already
    # sent): it is answered, empty, at the end of its 2 s long-poll — past the 0.6 s timeout.
    assert worker.stats["reserve_calls"] == 1
    assert 0.6 < took < 5.0, took
    assert servicer.stop_calls >= 2  # at once, then every RESERVE_STOP_EVERY while the call was open


async def test_a_call_still_open_is_cancelled_once_stop_reserving_goes_unanswered_for_the_timeout(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    await harness_with_queue(h)
    monkeypatch.setattr(_shutdown, "RESERVE_STOP_TIMEOUT", 0.6)
    servicer = CountingServicer(h.parts, h.engine, fails=True)  # StopReserving fails: the call stays parked
    async with serving(h.engine, servicer) as target:
        worker, took = await stop_parked_worker(target, h.engine)
    assert worker.stats["reserve_calls"] == 0  # cancelled at the timeout, long before its 20 s poll
    assert 0.6 <= took < 10.0, took
    assert servicer.stop_calls >= 2


async def test_jobs_a_stopping_worker_reserved_are_released_not_held(harness: Harness) -> None:
    """A worker stopped while its reserves bring jobs: every job is READY or COMPLETED after
    the stop, none RESERVED (the answered calls are taken in and their jobs released)."""
    h = harness
    acks = await h.engine.enqueue_batch([request("q") for _ in range(256)])
    ids = [job_id_bytes(ack[0]) for ack in acks if isinstance(ack, tuple)]
    assert len(ids) == 256
    async with serving(h.engine, WorkerServicer(h.parts, h.engine)) as target:
        worker = Worker(target, ["q"], concurrency=16, prefetch=64, max_reserve=32, poll_wait=5.0,
                        worker_id="W", token="")
        seen: list[Job] = []
        started = asyncio.Event()

        @worker.handler("t")
        async def t(job: Job) -> None:
            seen.append(job)
            started.set()
            await asyncio.sleep(0)

        run = asyncio.create_task(worker.run(install_signal_handlers=False))
        await asyncio.wait_for(started.wait(), 10)
        await worker.stop(5.0)
        await asyncio.wait_for(run, 10)
    states = {(await h.job(i)).state for i in ids if i is not None}
    assert State.RESERVED not in states, states
    assert worker.held == 0 and seen


# ---------- two processes sharing one worker id; odd ids
# A clean stop (StopReserving stopped=true) with two processes sharing one worker id, and odd ids.

async def test_one_of_two_same_id_workers_stops_the_other_keeps_reserving(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    await h.enqueue("q")
    assert len(await h.engine.reserve(["q"], 1, None, 0.0, "W")) == 1
    other = asyncio.create_task(h.engine.reserve(["q"], 1, None, 30.0, "W"))  # the second process, parked
    await until(lambda: h.engine.parked("W") == 1, what="the second process's reserve to park")
    h.clock.advance(1)
    h.engine.stop_reserving("W", stopped=True)  # the first process's last call
    assert await asyncio.wait_for(other, 10) == []  # its parked poll answers empty early …
    assert [v.state for v in await admin.workers()] == ["stopped"]  # … and its end notes nothing
    h.clock.advance(1)
    assert await h.engine.reserve(["q"], 1, None, 0.0, "W") == []  # it reserves again
    assert [v.state for v in await admin.workers()] == ["live"]


async def test_odd_ids_in_a_final_stop(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    with pytest.raises(InvalidRequest):
        h.engine.stop_reserving("", stopped=True)
    for wid in ("x" * 1025, "a\x00b", "x" * 1_000_000, "\u202e\u0007", " "):
        assert h.engine.stop_reserving(wid, stopped=True) == 0
    await h.enqueue("q")
    assert len(await h.engine.reserve(["q"], 1, None, 0.0, "real")) == 1
    assert [v.worker_id for v in await admin.workers()] == ["real"]
