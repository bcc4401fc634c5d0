"""A Worker pinned to one server that goes away (the new-user trial, docs/deploying.md "When a
node or the database goes away").

* Reconnect: the server is killed (SIGKILL) and started again on the same port; a job
  enqueued once it is back is worked within a bound. The worker's channel retries a
  connection every 100 ms – 1 s (the clients' backoff; gRPC's default, 1 s growing to 120 s,
  left it idle for 5–10 s after a restart), and its pause after a failed ``Reserve`` ends as
  soon as the channel is connected again.

Every server here is a real ``sepp serve`` process killed with SIGKILL: no mock of the
transport.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from support.servers import ServerFactory
from support.worker import fast_queue

from sepp import AsyncClient, EnqueueRequest
from sepp.testing import ServerProcess
from sepp.testing.process import free_port
from sepp.worker import Job, Worker

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.slow,
    pytest.mark.sqlite_only(reason="backend-neutral: the worker's channel and stop, not the storage"),
]

#: How soon after the restarted server's ready line a job enqueued then must be done, seconds.
#: The channel tries to connect at most every 1 s (± 20 % jitter: 1.2 s), and the reserve
#: loop's pause ends once it is connected; the rest (a Reserve, a handler that returns at once,
#: the enqueue through a new client) is milliseconds, so 2.5 s leaves 1.3 s for a loaded
#: machine. Before the fix this took 5–10 s (gRPC's default backoff plus a pause of up to 5 s).
BACK_WITHIN = 2.5
#: Seconds the server stays down, one round each: long enough that gRPC's default backoff
#: (1 s, 1.6 s, 2.6 s … ± 20 %) and the old reserve pause (0.05 s doubling to 5 s) had grown
#: past BACK_WITHIN; where the server comes back in their cycle is chance, so one round alone
#: let the old code pass now and then (it failed 2 runs of 3 at 8 s).
OUTAGES = (2.0, 5.0, 8.0)


async def until(probe: Callable[[], object], within: float, what: str) -> None:
    """Poll ``probe`` every 10 ms on the loop until it is truthy; ``AssertionError`` after ``within`` s."""
    deadline = time.monotonic() + within
    while not probe():
        assert time.monotonic() < deadline, f"timed out after {within} s waiting for {what}"
        await asyncio.sleep(0.01)


def pinned_server(server_factory: ServerFactory) -> ServerProcess:
    """A server on a fixed port (so it can come back on it), queue ``q`` with 60 s leases."""
    return server_factory(grpc_listen=f"127.0.0.1:{free_port()}", queues={"q": fast_queue(lease_duration=60.0)})


async def enqueue(target: str) -> str:
    """One job of type ``t`` on ``q`` through a new client; its id."""
    async with AsyncClient(target) as client:
        return (await client.enqueue(EnqueueRequest("q", "t"))).job_id


async def test_a_pinned_worker_works_again_soon_after_its_server_restarts(server_factory: ServerFactory) -> None:
    server = pinned_server(server_factory)
    done: dict[str, float] = {}
    worker = Worker(server.grpc_target, ["q"], poll_wait=5.0, concurrency=2)

    @worker.handler("t")
    async def t(job: Job) -> None:
        done[job.id] = time.monotonic()

    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    try:
        first = await enqueue(server.grpc_target)
        await until(lambda: first in done, 10, "the first job")
        took: list[float] = []
        for outage in OUTAGES:
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(outage)  # the outage itself (what is measured comes after it)
            await asyncio.to_thread(server.start)
            back = time.monotonic()
            job_id = await enqueue(server.grpc_target)
            await until(lambda j=job_id: j in done, 30, f"the job enqueued after a {outage} s outage")  # type: ignore[misc]
            took.append(round(done[job_id] - back, 2))
        assert max(took) < BACK_WITHIN, f"seconds from the server being back to the job done, per round: {took}"
    finally:
        await worker.stop(2.0)
        await asyncio.wait_for(run, 30)
