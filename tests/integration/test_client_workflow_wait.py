"""``Client.wait`` / ``Client.result`` given a workflow id, end to end (docs/workflows.md
"Waiting for a workflow"): answered when every node is finished; the result is the sink's
(a chain's last step, a chord's callback); a failed workflow raises naming the failed node;
the async client the same."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from support.worker import Wire, wire_for

from sepp import AsyncClient, Client, EnqueueRequest, JobCancelled, JobFailed, WaitTimeout, chain, chord, group
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess


@pytest.fixture
def wire(shared_server: ServerProcess, fresh_queue: str) -> Iterator[Wire]:
    with wire_for(shared_server, fresh_queue) as w:
        yield w


def _ack(wire: Wire, queue: str, result: bytes) -> str:
    """Reserve the next job of ``queue`` and ack it with ``result`` (JSON); its id."""
    res = wire.reserve_one([queue], wait=5.0)
    wire.worker.Ack(wpb.AckRequest(job_id=res.job.id, lease_id=res.lease_id,
                                   result=pb.Payload(data=result, encoding="application/json")), timeout=10)
    return res.job.id


def test_result_of_a_chain_is_its_last_steps_and_waits_for_every_node(shared_server: ServerProcess, wire: Wire,
                                                                        fresh_queue: str) -> None:
    q = fresh_queue
    with Client(shared_server.grpc_target) as client:
        ack = client.enqueue_workflow(chain(EnqueueRequest(q, "a"), EnqueueRequest(q, "b")))
        with pytest.raises(WaitTimeout):
            client.result(ack.workflow_id, timeout=0)
        _ack(wire, q, b"1")
        with pytest.raises(WaitTimeout):  # one node of two finished: not yet
            client.result(ack.workflow_id, timeout=0)
        worker = threading.Thread(target=lambda: _ack(wire, q, b'{"sum": 3}'), daemon=True)
        worker.start()  # the wait below parks and is woken by the last node's ack
        assert client.result(ack.workflow_id, timeout=60) == {"sum": 3}
        worker.join()
        (outcome,) = client.wait([ack.workflow_id]).values()
    assert (outcome.job_id, outcome.state, outcome.job_type) == (ack.workflow_id, "COMPLETED", "b")


def test_a_failed_workflow_raises_naming_the_failed_node(shared_server: ServerProcess, wire: Wire,
                                                         fresh_queue: str) -> None:
    q = fresh_queue
    with Client(shared_server.grpc_target) as client:
        ack = client.enqueue_workflow(chord([EnqueueRequest(q, "part"), EnqueueRequest(q, "part")],
                                            EnqueueRequest(q, "sum")))
        first = ack.acks[0].job_id
        res = wire.reserve_one([q], wait=5.0)
        assert res.job.id == first
        wire.worker.Nack(wpb.NackRequest(job_id=first, lease_id=res.lease_id, dead_letter="boom",
                                         error=wpb.JobError(message="it broke")), timeout=10)
        with pytest.raises(WaitTimeout):  # the other part is still READY
            client.result(ack.workflow_id, timeout=0)
        _ack(wire, q, b"2")
        with pytest.raises(JobFailed) as failed:
            client.result(ack.workflow_id, timeout=30)
    assert f"node {first} (part) was dead-lettered" in failed.value.outcome.reason
    assert failed.value.last_error == "it broke"


def test_a_cancelled_workflow_and_a_group_and_the_async_client(shared_server: ServerProcess, wire: Wire,
                                                               fresh_queue: str) -> None:
    q = fresh_queue
    with Client(shared_server.grpc_target) as client:
        cancelled = client.enqueue_workflow(chain(EnqueueRequest(q, "x"), EnqueueRequest(q, "y")))
        wire.cancel(cancelled.acks[0].job_id)  # its dependent is cancelled with it
        with pytest.raises(JobCancelled):
            client.result(cancelled.workflow_id, timeout=30)
        both = client.enqueue_workflow(group([EnqueueRequest(q, "g"), EnqueueRequest(q, "g")]))
    _ack(wire, q, b"1")
    _ack(wire, q, b"2")

    async def run() -> object:
        async with AsyncClient(shared_server.grpc_target) as aclient:
            return await aclient.result(both.workflow_id, timeout=30)

    assert asyncio.run(run()) is None  # two sinks: no one result
