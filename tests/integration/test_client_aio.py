"""The AsyncClient against a real ``sepp serve``: same surface as Client, plus load shedding."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import grpc
import pytest
from support.servers import ServerFactory

from sepp import (
    AsyncClient,
    AtomicEnqueueError,
    ClientOptions,
    EnqueueAck,
    EnqueueRequest,
    Overloaded,
    RejectedError,
    Rejection,
    RejectionCode,
    RetryPolicy,
    Unavailable,
)
from sepp.testing import ServerProcess
from sepp.testing.process import free_port

pytestmark = pytest.mark.sqlite_only(reason=(
    "backend-neutral: the async client's transport behaviour; the store is exercised by the "
    "sync client tests on both"))


async def test_async_client_enqueues_and_deduplicates(shared_server: ServerProcess) -> None:
    async with AsyncClient(shared_server.grpc_target) as client:
        key = uuid.uuid4().hex
        first = await client.enqueue(EnqueueRequest("emails", "welcome", idempotency_key=key))
        again = await client.enqueue(EnqueueRequest("emails", "welcome", idempotency_key=key))
        assert again == EnqueueAck(first.job_id, True)
        info = await client.get_server_info()
        assert info.limits.max_enqueue_batch == 256
        assert await client.get_server_info(cached=True) == info


@pytest.mark.parametrize("validate_locally", [True, False])
async def test_async_client_batches_and_rejections_match_the_sync_shape(shared_server: ServerProcess,
                                                                        validate_locally: bool) -> None:
    options = ClientOptions(validate_locally=validate_locally)
    async with AsyncClient(shared_server.grpc_target, options=options) as client:
        results = await client.enqueue_batch([EnqueueRequest("q", "a"), EnqueueRequest("q", "b", priority=10),
                                              EnqueueRequest("q", "c")])
        assert isinstance(results[0], EnqueueAck) and isinstance(results[2], EnqueueAck)
        assert isinstance(results[1], Rejection) and results[1].field == "priority"

        with pytest.raises(RejectedError) as single:
            await client.enqueue(EnqueueRequest("q", "\x07bell"))
        assert single.value.code is RejectionCode.JOB_TYPE_INVALID

        with pytest.raises(AtomicEnqueueError) as atomic:
            await client.enqueue_atomic([EnqueueRequest("q", "a"), EnqueueRequest("q", "b", max_attempts=0)])
        assert [(e.index, e.rejection.field) for e in atomic.value.errors] == [(1, "max_attempts")]

        acks = await client.enqueue_atomic([EnqueueRequest("q", "a"), EnqueueRequest("q", "b")])
        assert len(acks) == 2


async def test_async_validate_gives_the_local_verdict(shared_server: ServerProcess) -> None:
    async with AsyncClient(shared_server.grpc_target) as client:
        assert await client.validate(EnqueueRequest("q", "t")) is None
        verdict = await client.validate(EnqueueRequest("q", "t", idempotency_key="k" * 257))
        assert verdict is not None and verdict.code is RejectionCode.IDEMPOTENCY_KEY_TOO_LONG


async def test_overloaded_is_raised_with_retry_after_and_retried_when_allowed(server: ServerProcess) -> None:
    server.restart(max_commit_backlog=1, debug_commit_delay=0.2, overload_retry_after=0.05)
    jobs = [EnqueueRequest("q", f"job-{i}") for i in range(6)]

    no_retry = ClientOptions(retry=RetryPolicy.disabled())
    async with AsyncClient(server.grpc_target, options=no_retry) as client:
        await client.get_server_info(cached=True)
        outcomes = await asyncio.gather(*(client.enqueue(j) for j in jobs), return_exceptions=True)
    shed = [o for o in outcomes if isinstance(o, Overloaded)]
    assert shed, outcomes
    assert all(o.retry_after == pytest.approx(0.05) for o in shed)
    assert all(isinstance(o, EnqueueAck | Overloaded) for o in outcomes)

    patient = ClientOptions(retry=RetryPolicy(max_attempts=100, initial_backoff=0.05, max_backoff=0.3))
    async with AsyncClient(server.grpc_target, options=patient) as client:
        acks = await asyncio.gather(*(client.enqueue(j) for j in jobs))
    assert len({a.job_id for a in acks}) == len(jobs)


async def test_async_client_closes_twice_and_refuses_calls_after(shared_server: ServerProcess) -> None:
    client = AsyncClient(shared_server.grpc_target)
    await client.get_server_info()
    await client.close()
    await client.close()
    with pytest.raises(RuntimeError, match="closed"):
        await client.get_server_info()


def test_an_async_client_called_from_another_event_loop_says_so(shared_server: ServerProcess) -> None:
    # A client kept across two asyncio.run calls (a module-level client, a test per loop):
    # its channel belongs to the first loop. The second loop's call used to fail deep in
    # grpc.aio ("Event loop is closed", "attached to a different loop").
    client = AsyncClient(shared_server.grpc_target)
    assert asyncio.run(client.enqueue(EnqueueRequest("two-loops", "t"))).job_id
    for call in (lambda: client.enqueue(EnqueueRequest("two-loops", "t")), client.get_server_info):
        with pytest.raises(RuntimeError, match="one AsyncClient per event loop"):
            asyncio.run(call())


#: Seconds a restarted server may take to answer again on a loaded machine.
RESTART_WITHIN = 60.0


async def test_async_calls_wait_for_a_restarting_server_and_an_absent_one_is_unavailable_unsent(
        server_factory: ServerFactory) -> None:
    """A call waits for a connection within its deadline, for the AsyncClient too: calls made
    while the server is down (SIGTERM, or SIGKILL) wait for it and go through once it is
    back, keyed or not; a server that never comes back makes the call ``Unavailable`` with
    ``not_sent`` once its deadline passes.

    The calls start once the client's channel has seen the connection go: a call made before
    that goes out on the dead connection ("Stream removed (sendmsg: Broken pipe)") — a call in
    flight when the server died, which may have been stored, so an unkeyed one fails
    (test_client_restart.py covers those; a loaded CI machine was that slow once)."""
    server = server_factory(grpc_listen=f"127.0.0.1:{free_port()}")  # the same port after a restart
    # A deadline longer than a loaded machine's server start (the default 10 s was not once).
    async with AsyncClient(server.grpc_target, options=ClientOptions(timeout=RESTART_WITHIN)) as client:
        await client.enqueue(EnqueueRequest("back", "t"))
        for stop in (server.terminate, server.kill):
            stop()
            await _until_disconnected(client)
            calls = [asyncio.ensure_future(client.enqueue(EnqueueRequest("back", "t", idempotency_key=key)))
                     for key in (uuid.uuid4().hex, None)]
            await asyncio.sleep(0.3)  # a check that nothing happens: the calls wait for the server
            assert not any(call.done() for call in calls)
            await asyncio.get_running_loop().run_in_executor(None, server.start)
            acks = await asyncio.wait_for(asyncio.gather(*calls), RESTART_WITHIN)
            assert [ack.deduplicated for ack in acks] == [False, False]
    server.kill()
    async with AsyncClient(server.grpc_target, options=ClientOptions(timeout=0.5)) as client:
        with pytest.raises(Unavailable) as info:
            await client.enqueue(EnqueueRequest("back", "t"))
    assert info.value.not_sent


async def _until_disconnected(client: AsyncClient, longest: float = 10.0) -> None:
    """Wait until ``client``'s channel has left READY (it noticed its connection closed)."""
    channel = client._channel
    assert channel is not None
    state = channel.get_state()
    deadline = asyncio.get_running_loop().time() + longest
    while state is grpc.ChannelConnectivity.READY:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, "the client's channel still READY 10 s after the server stopped"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(channel.wait_for_state_change(state), left)
        state = channel.get_state()
