"""The Worker's batched settler (``sepp.worker._settler``) against a real server.

An item submitted after the last send task saw its queue empty, but
before that task's done-callback ran, was never sent (and ``flush`` returned without
it). The test drives a submit into exactly that gap: a callback on the previous item's
future runs after the send task has ended and before its done-callbacks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from support.servers import module_server
from support.worker import count_states, fast_queue, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess
from sepp.worker._rpc import WorkerRpc
from sepp.worker._settler import Settled, Settler
from sepp.worker.outcome import COMPLETED

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module: every queue has a 30 s lease; each test works on its ``fresh_queue``."""
    yield from module_server(tmp_path_factory, backend, queue_defaults=fast_queue(lease_duration=30.0))


@pytest.fixture
async def settler(fast: ServerProcess) -> AsyncIterator[Settler]:
    """A Settler over a real channel to ``fast``."""
    rpc = WorkerRpc(fast.grpc_target)
    try:
        yield Settler(rpc)
    finally:
        await rpc.close()


def reserve(server: ServerProcess, queue: str, n: int) -> list[tuple[str, str]]:
    """Enqueue and reserve ``n`` jobs on ``queue``; their (job id, lease id) pairs."""
    with wire_for(server, queue) as w:
        w.enqueue_many([pb.EnqueueRequest(queue=queue, job_type="t") for _ in range(n)])
        got = w.reserve(max_jobs=n)
    assert len(got) == n
    return [(r.job.id, r.lease_id) for r in got]


async def submit_in_the_gap(settler: Settler, first: tuple[str, str],
                            late: tuple[str, str]) -> asyncio.Future[Settled]:
    """Submit ``first``; from its future's callback (its send task has ended, its done-callback
    has not run) submit ``late``. Returns ``late``'s future once ``first`` has its verdict."""
    out: list[asyncio.Future[Settled]] = []

    def in_the_gap(_: object) -> None:
        # Exactly the gap: every send task is finished, but still registered.
        assert settler._tasks and all(t.done() for t in settler._tasks)
        out.append(settler.submit(COMPLETED, *late))

    fut = settler.submit(COMPLETED, *first)
    fut.add_done_callback(in_the_gap)
    assert (await fut).result.ok
    assert len(out) == 1
    return out[0]


async def test_an_item_submitted_as_the_last_send_ends_is_sent_without_flush(fast: ServerProcess, fresh_queue: str,
                                                                            settler: Settler) -> None:
    first, late = reserve(fast, fresh_queue, 2)
    fut = await submit_in_the_gap(settler, first, late)
    settled = await asyncio.wait_for(fut, 5)  # never came before the fix
    assert settled.result.ok and not settled.resent
    assert (settler.calls, settler.items) == (2, 2)
    assert count_states(fast, fresh_queue) == {"COMPLETED": 2}


async def test_flush_waits_for_an_item_submitted_in_the_gap(fast: ServerProcess, fresh_queue: str,
                                                           settler: Settler) -> None:
    first, late = reserve(fast, fresh_queue, 2)
    fut = await submit_in_the_gap(settler, first, late)
    await asyncio.wait_for(settler.flush(), 5)
    assert fut.done() and fut.result().result.ok  # flush used to return with it unsent
    assert settler.pending == 0
    assert count_states(fast, fresh_queue) == {"COMPLETED": 2}


async def test_items_queued_while_a_send_is_in_flight_leave_together(fast: ServerProcess, fresh_queue: str,
                                                                    settler: Settler) -> None:
    jobs = reserve(fast, fresh_queue, 6)
    futs = [settler.submit(COMPLETED, *job) for job in jobs]  # the first starts a send at once
    results = await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert all(r.result.ok for r in results)
    # One send task drains all six: one call for the first batch it took (all six were
    # queued before it ran), no second task was started.
    assert (settler.calls, settler.items) == (1, 6)
    assert count_states(fast, fresh_queue) == {"COMPLETED": 6}


async def test_notified_items_are_told_once_per_batch_in_order(fast: ServerProcess, fresh_queue: str) -> None:
    """``notify`` items: one ``on_verdicts`` call per batch, args and results in order (a
    refused item among them); in a batch with a ``submit`` future, item by item."""
    told: list[tuple[list[str], list[bool] | None, int, BaseException | None]] = []

    def on_verdicts(args: list[str], results: list[wpb.SettleResult] | None, resent: int,
                    error: BaseException | None) -> None:
        told.append((args, None if results is None else [r.ok for r in results], resent, error))

    rpc = WorkerRpc(fast.grpc_target)
    try:
        settler = Settler(rpc, on_verdicts=on_verdicts)
        (j0, l0), (j1, l1), (j2, _), (j3, l3), (j4, l4) = reserve(fast, fresh_queue, 5)
        settler.notify(COMPLETED, j0, l0, "a")  # all three queued before the send task runs
        settler.notify(COMPLETED, j1, l1, "b")
        settler.notify(COMPLETED, j2, str(uuid.uuid4()), "c")  # not its lease: refused
        await asyncio.wait_for(settler.flush(), 5)
        assert told == [(["a", "b", "c"], [True, True, False], 0, None)]
        told.clear()
        fut = settler.submit(COMPLETED, j3, l3)
        settler.notify(COMPLETED, j4, l4, "d")
        await asyncio.wait_for(settler.flush(), 5)
        assert fut.done() and fut.result().result.ok and not fut.result().resent
        assert told == [(["d"], [True], 0, None)]
        assert (settler.calls, settler.items) == (2, 5)
    finally:
        await rpc.close()
    assert count_states(fast, fresh_queue) == {"COMPLETED": 4, "RESERVED": 1}
