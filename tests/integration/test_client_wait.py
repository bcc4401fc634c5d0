"""Waiting for jobs through a real server, with ``Client`` and ``AsyncClient``: ``result``
returns the decoded result of a completed job and raises ``JobFailed`` (with the last error
and the attempt history) for a dead-lettered one, ``JobCancelled`` for a cancelled one,
``JobNotFound`` for an id of no job and ``WaitTimeout`` (a ``TimeoutError``) when time runs
out; ``wait`` answers every job; ``as_completed`` yields each job once, in the order they
finish (more than 1,000 ids in chunks side by side); a timeout longer than one long-poll is
several; a wait rides out a server restart; roles ``produce`` and ``admin`` may wait, ``work``
may not."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.auth import TOKENS, auth_config
from support.servers import module_server
from support.worker import Wire, pinned_server, wire_for

from sepp import AsyncClient, Client, ClientOptions, EnqueueRequest, JobCancelled, JobFailed, JobNotFound, WaitTimeout
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.errors import PermissionDenied
from sepp.testing import ServerProcess

UNKNOWN = "0190f1c2-0000-7000-8000-0000000000aa"


@pytest.fixture
def wire(shared_server: ServerProcess, fresh_queue: str) -> Iterator[Wire]:
    """Raw stubs on the module's shared server, default queue of this test's own."""
    with wire_for(shared_server, fresh_queue) as w:
        yield w


def _later(delay: float, action: Any) -> threading.Thread:
    """Run ``action()`` in a thread after ``delay`` seconds (the other side of a wait)."""
    def run() -> None:
        time.sleep(delay)  # the wait must be parked first: this delay is the test's subject
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_result_waits_for_the_ack_and_returns_the_result(shared_server: ServerProcess, wire: Wire) -> None:
    job_id = wire.enqueue()
    res = wire.reserve_one()
    with Client(shared_server.grpc_target) as client:
        with pytest.raises(WaitTimeout) as early:
            client.result(job_id, timeout=0)  # a timeout of 0 looks once
        assert isinstance(early.value, TimeoutError) and early.value.pending == [job_id]
        acker = _later(0.3, lambda: wire.ack(res))
        started = time.monotonic()
        assert client.result(job_id, timeout=30) is None  # no result stored: None
        assert time.monotonic() - started < 10
        acker.join()
        (outcome,) = client.wait([job_id]).values()
    assert (outcome.job_id, outcome.state, outcome.attempt, outcome.result) == (job_id, "COMPLETED", 1, None)
    assert [a.outcome for a in outcome.attempts] == ["completed"] and outcome.finished_at is not None


def test_a_dead_lettered_job_raises_job_failed_with_its_history(shared_server: ServerProcess, wire: Wire) -> None:
    job_id = wire.enqueue(max_attempts=2)
    wire.nack(wire.reserve_one(), "retry_after", delay=0.0, message="first", detail="trace 1")
    wire.nack(wire.reserve_one(), "retry", message="second")
    with Client(shared_server.grpc_target) as client, pytest.raises(JobFailed) as failed:
        client.result(job_id, timeout=10)
    exc = failed.value
    assert exc.last_error == "second" and exc.reason.startswith("ATTEMPTS_EXHAUSTED")
    assert [(a.attempt, a.outcome, a.error_message) for a in exc.attempts] == [
        (1, "retry_after", "first"), (2, "attempts_exhausted", "second")]
    assert exc.attempts[0].error_detail == "trace 1" and job_id in str(exc) and "second" in str(exc)


def test_a_cancelled_job_raises_job_cancelled(shared_server: ServerProcess, wire: Wire) -> None:
    job_id = wire.enqueue()
    with Client(shared_server.grpc_target) as client:
        canceller = _later(0.3, lambda: wire.cancel(job_id, "not needed"))
        with pytest.raises(JobCancelled) as cancelled:
            client.result(job_id, timeout=30)
        canceller.join()  # its answer may come after the wait's: the channel stays open for it
    assert cancelled.value.outcome.state == "CANCELLED" and "not needed" in str(cancelled.value)


def test_an_outcomes_value_raises_what_result_raises(shared_server: ServerProcess, wire: Wire) -> None:
    """A new user's report: ``JobOutcome.value()`` of a dead-lettered job was None, while the
    docs said it decodes as ``Client.result`` would (which raises ``JobFailed``)."""
    dead, cancelled, done = wire.enqueue(max_attempts=1), wire.enqueue(), wire.enqueue()
    wire.nack(wire.reserve_one(), "dead_letter", message="poison")
    wire.cancel(cancelled, "not needed")
    res = wire.reserve_one()
    wire.worker.Ack(wpb.AckRequest(job_id=res.job.id, lease_id=res.lease_id,
                                   result=pb.Payload(data=b'{"n": 1}', encoding="application/json")), timeout=10)
    with Client(shared_server.grpc_target) as client:
        outcomes = client.wait([dead, cancelled, done], timeout=30)
        for job_id, error in ((dead, JobFailed), (cancelled, JobCancelled)):
            with pytest.raises(error) as from_result:
                client.result(job_id, timeout=0)
            with pytest.raises(error) as from_value:
                outcomes[job_id].value()
            assert str(from_value.value) == str(from_result.value)
            assert from_value.value.outcome == outcomes[job_id]
        assert outcomes[done].value() == client.result(done, timeout=0) == {"n": 1}


def test_an_unknown_id_is_job_not_found_and_a_bad_one_a_value_error(shared_server: ServerProcess) -> None:
    with Client(shared_server.grpc_target) as client:
        with pytest.raises(JobNotFound) as missing:
            client.wait([UNKNOWN], timeout=30)
        assert missing.value.job_id == UNKNOWN and UNKNOWN in str(missing.value)
        with pytest.raises(ValueError):
            client.result("not-an-id")


def test_wait_answers_every_job_and_as_completed_yields_each_once_as_it_finishes(
        shared_server: ServerProcess, wire: Wire) -> None:
    ids = [wire.enqueue() for _ in range(3)]
    first = wire.reserve_one()
    wire.ack(first)
    with Client(shared_server.grpc_target) as client:
        seen = []
        leases = iter([wire.reserve_one(), wire.reserve_one()])
        for outcome in client.as_completed(ids, timeout=30):
            seen.append(outcome.job_id)
            nxt = next(leases, None)
            if nxt is not None:
                wire.ack(nxt)
        assert seen == ids  # in the order they finished (FIFO queue)
        done = client.wait(ids, timeout=0)
        assert list(done) == ids and all(o.completed for o in done.values())


def test_a_timeout_longer_than_the_servers_max_wait_is_several_long_polls(server_factory: Any) -> None:
    server = server_factory(limits={"max_wait_seconds": 1.0})
    with wire_for(server) as w, Client(server.grpc_target) as client:
        job_id = w.enqueue()
        assert client.get_server_info().limits.max_wait_seconds == 1.0  # cached: polls of 1 s
        res = w.reserve_one()
        acker = _later(2.5, lambda: w.ack(res))
        started = time.monotonic()
        assert client.result(job_id, timeout=30) is None
        assert 2.4 <= time.monotonic() - started < 15
        acker.join()
        with pytest.raises(WaitTimeout):
            client.result(w.enqueue(), timeout=1.5)


def test_a_wait_rides_out_a_server_restart(server_factory: Any) -> None:
    server = pinned_server(server_factory)
    with wire_for(server) as w:
        job_id = w.enqueue()
    got: list[Any] = []
    with Client(server.grpc_target, options=ClientOptions(timeout=30.0)) as client:
        waiter = threading.Thread(target=lambda: got.append(client.result(job_id, timeout=120)), daemon=True)
        waiter.start()
        time.sleep(0.5)  # the wait is parked on the first server: the restart must happen under it
        server.restart()
        with wire_for(server) as w:
            w.ack(w.reserve_one())
        waiter.join(60)
    assert not waiter.is_alive() and got == [None]


async def test_the_async_client_waits_the_same(shared_server: ServerProcess, wire: Wire) -> None:
    ids = [wire.enqueue() for _ in range(2)]
    async with AsyncClient(shared_server.grpc_target) as client:
        with pytest.raises(WaitTimeout):
            await client.result(ids[0], timeout=0.2)
        res = await asyncio.to_thread(wire.reserve_one)
        await asyncio.to_thread(wire.ack, res)
        assert await client.result(ids[0], timeout=10) is None
        res = await asyncio.to_thread(wire.reserve_one)
        await asyncio.to_thread(wire.nack, res, "dead_letter", reason="no", message="nope")
        seen = [o async for o in client.as_completed(ids, timeout=10)]
        assert [(o.job_id, o.state) for o in seen] == [(ids[0], "COMPLETED"), (ids[1], "DEAD_LETTERED")]
        with pytest.raises(JobFailed):
            await client.result(ids[1])
        with pytest.raises(JobNotFound):
            await client.wait([UNKNOWN])


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, **auth_config())


@pytest.mark.sqlite_only(reason="backend-neutral: roles are checked by the gRPC interceptor before any store call")
def test_roles_produce_and_admin_may_wait_and_work_may_not(locked: ServerProcess) -> None:
    with Client(locked.grpc_target, token=TOKENS["producer"][0]) as producer:
        job_id = producer.enqueue(EnqueueRequest("auth-wait", "t")).job_id
    for name in ("producer", "admin", "ops"):
        with Client(locked.grpc_target, token=TOKENS[name][0]) as client, pytest.raises(WaitTimeout):
            client.result(job_id, timeout=0)
    with Client(locked.grpc_target, token=TOKENS["worker"][0]) as worker, pytest.raises(PermissionDenied):
        worker.result(job_id, timeout=0)


def test_more_than_1000_ids_are_waited_for_in_chunks(shared_server: ServerProcess, wire: Wire) -> None:
    ids: list[str] = []
    for _ in range(0, 1001, 250):
        ids += wire.enqueue_many([pb.EnqueueRequest(queue=wire.queue, job_type="t") for _ in range(250)])
    ids = ids[:1001]
    wire.cancel(ids[-1])  # in the second chunk
    wire.cancel(ids[0])
    with Client(shared_server.grpc_target) as client:
        seen: list[str] = []
        with pytest.raises(WaitTimeout) as timed_out:
            for outcome in client.as_completed(ids, timeout=1.0):
                seen.append(outcome.job_id)
        assert sorted(seen) == sorted([ids[0], ids[-1]])
        assert len(timed_out.value.pending) == 999 and set(timed_out.value.finished) == set(seen)

    async def with_async() -> list[str]:
        async with AsyncClient(shared_server.grpc_target) as aclient:
            got: list[str] = []
            with pytest.raises(WaitTimeout):
                async for outcome in aclient.as_completed(ids, timeout=1.0):
                    got.append(outcome.job_id)
            return got

    assert sorted(asyncio.run(with_async())) == sorted([ids[0], ids[-1]])
