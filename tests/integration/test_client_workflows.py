"""``Client.enqueue_workflow`` end to end against a real ``sepp serve`` (docs/workflows.md
"Workflows"): the builders' shapes (``Workflow``, ``chain``, ``group``, ``chord``, task
signatures), a chain run in order, a chord's callback released once after all its children,
a refused node refusing the whole workflow by index (found locally or by the server), a
malformed graph as InvalidArgument, a retried key, and the async twin."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
from support.worker import Wire, wire_for

from sepp import (
    AsyncClient,
    AtomicEnqueueError,
    Client,
    ClientOptions,
    EnqueueRequest,
    RejectedError,
    RejectionCode,
    Workflow,
    WorkflowAck,
    chain,
    chord,
    group,
)
from sepp.api.v1 import producer_pb2 as ppb
from sepp.domain.states import State
from sepp.tasks import App
from sepp.testing import ServerProcess

SERVER_ONLY = ClientOptions(validate_locally=False)
BOTH = pytest.mark.parametrize("options", [ClientOptions(), SERVER_ONLY], ids=["local", "server"])


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.grpc_target) as c:
        yield c


@pytest.fixture
def wire(shared_server: ServerProcess) -> Iterator[Wire]:
    with wire_for(shared_server) as w:
        yield w


def _queue() -> str:
    return f"wf-{uuid.uuid4().hex[:8]}"


def _run_all(wire: Wire, queues: list[str], expected: int) -> list[str]:
    """Reserve and ack one job at a time from ``queues`` until ``expected`` ran; their ids in
    the order they ran. Fails when a job expected does not come."""
    ran: list[str] = []
    while len(ran) < expected:
        res = wire.reserve_one(queues, wait=5.0)
        ran.append(res.job.id)
        wire.ack(res)
    assert wire.reserve(queues) == []
    return ran


def test_the_builders_shapes() -> None:
    r1, r2, r3, cb = (EnqueueRequest("q", t) for t in ("a", "b", "c", "cb"))
    assert [list(n.after) for n in chain(r1, r2, r3).to_proto().nodes] == [[], [0], [1]]
    assert [list(n.after) for n in group([r1, r2]).to_proto().nodes] == [[], []]
    assert [list(n.after) for n in chord([r1, r2, r3], cb).to_proto().nodes] == [[], [], [], [0, 1, 2]]
    wf = Workflow(idempotency_key="k")
    a = wf.add(r1)
    wf.add(r2, after=[a])
    msg = wf.to_proto()
    assert msg.idempotency_key == "k" and [n.job.job_type for n in msg.nodes] == ["a", "b"]
    with pytest.raises(ValueError, match="after="):
        Workflow().add(r2, after=[a])  # a node of another workflow
    with pytest.raises(TypeError):
        wf.add("not a request")  # type: ignore[arg-type]


def test_task_signatures_are_nodes() -> None:
    app = App()

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    msg = chain(add.s(1, 2), add.si(3, 4), add.s(5)).to_proto()
    assert [(n.job.queue, n.job.job_type) for n in msg.nodes] == [(add.queue, add.job_type)] * 3
    assert json.loads(msg.nodes[1].job.payload.data) == {"args": [3, 4], "kwargs": {}}
    assert json.loads(msg.nodes[2].job.payload.data) == {"args": [5], "kwargs": {}, "prepend": "result"}
    assert [list(n.after) for n in msg.nodes] == [[], [0], [1]]


def test_a_chain_runs_in_order(client: Client, wire: Wire) -> None:
    q = _queue()
    ack = client.enqueue_workflow(chain(*(EnqueueRequest(q, f"step{i}") for i in range(4))))
    assert isinstance(ack, WorkflowAck) and not ack.deduplicated and uuid.UUID(ack.workflow_id)
    ids = [a.job_id for a in ack.acks]
    assert [int(wire.get_job(i).state) for i in ids] == [State.READY] + [State.DEFERRED] * 3
    assert _run_all(wire, [q], 4) == ids


def test_a_chord_callback_is_released_once_after_all_children(client: Client, wire: Wire) -> None:
    kids, cbq = _queue(), _queue()
    ack = client.enqueue_workflow(chord([EnqueueRequest(kids, "kid") for _ in range(5)], EnqueueRequest(cbq, "cb")))
    callback = ack.acks[-1].job_id
    for res in wire.reserve([kids], 5):
        assert int(wire.get_job(callback).state) == State.DEFERRED
        wire.ack(res)
    assert _run_all(wire, [cbq], 1) == [callback]


@BOTH
def test_an_invalid_node_rejects_the_whole_workflow_with_its_index(shared_server: ServerProcess, wire: Wire,
                                                                   options: ClientOptions) -> None:
    q = _queue()
    bad = EnqueueRequest(q, "t", priority=42)
    with Client(shared_server.grpc_target, options=options) as c:
        with pytest.raises(AtomicEnqueueError) as info:
            c.enqueue_workflow(chain(EnqueueRequest(q, "t"), bad, EnqueueRequest(q, "t")))
    assert [(e.index, e.rejection.code) for e in info.value.errors] == [(1, RejectionCode.INVALID_ARGUMENT)]
    assert wire.reserve([q]) == []


def test_an_edge_to_no_node_or_a_cycle_is_invalid_argument(client: Client, wire: Wire) -> None:
    q = _queue()
    job = EnqueueRequest(q, "t").to_proto()
    for after in ([[], [5]], [[1], [0]]):
        message = ppb.EnqueueWorkflowRequest(nodes=[ppb.WorkflowNode(job=job, after=a) for a in after])
        with pytest.raises(RejectedError) as info:
            client._call(client._stub.EnqueueWorkflow, message, idempotent=False)
        assert info.value.code is RejectionCode.INVALID_ARGUMENT
    assert wire.reserve([q]) == []


def test_a_retried_key_returns_the_same_ids(client: Client, wire: Wire) -> None:
    q = _queue()
    key = f"order-{uuid.uuid4()}"
    first = client.enqueue_workflow(group([EnqueueRequest(q, "a"), EnqueueRequest(q, "b")], idempotency_key=key))
    again = client.enqueue_workflow(group([EnqueueRequest(q, "a"), EnqueueRequest(q, "b")], idempotency_key=key))
    assert again.deduplicated and again.workflow_id == first.workflow_id
    assert [a.job_id for a in again.acks] == [a.job_id for a in first.acks]
    assert len(_run_all(wire, [q], 2)) == 2


def test_the_async_client(shared_server: ServerProcess, wire: Wire) -> None:
    q = _queue()

    async def main() -> WorkflowAck:
        async with AsyncClient(shared_server.grpc_target) as c:
            return await c.enqueue_workflow(chain(EnqueueRequest(q, "a"), EnqueueRequest(q, "b")))

    ack = asyncio.run(main())
    assert _run_all(wire, [q], 2) == [a.job_id for a in ack.acks]
