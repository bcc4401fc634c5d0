"""A workflow larger than one gRPC message, against a real ``sepp serve`` (docs/workflows.md
"A graph larger than one message"): the client streams it in parts (``EnqueueWorkflowParts``)
and the server stores it in one commit — a chain across parts runs in order, the sync and the
async client, a key kept across parts; the server's bounds (10,000 nodes in all and one past,
a later part naming another key) refuse the whole graph, storing nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import grpc
import pytest
from support.worker import Wire, wire_for

from sepp import AsyncClient, Client, ClientOptions, EnqueueRequest, Payload, WorkflowAck, chain, group
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc
from sepp.client._workflow_methods import parts
from sepp.domain.states import State
from sepp.errors import MessageTooLarge
from sepp.hard_limits import MAX_WORKFLOW_NODES
from sepp.testing import ServerProcess

#: A client cap small enough that a few dozen 2 KB nodes need several parts.
SMALL = ClientOptions(max_message_bytes=32 * 1024)


@pytest.fixture
def wire(shared_server: ServerProcess) -> Iterator[Wire]:
    with wire_for(shared_server) as w:
        yield w


def _queue() -> str:
    return f"wfp-{uuid.uuid4().hex[:8]}"


def _steps(q: str, n: int) -> list[EnqueueRequest]:
    return [EnqueueRequest(q, f"s{i}", payload=Payload(b"x" * 2000)) for i in range(n)]


def test_the_parts_keep_every_node_in_order_within_the_cap() -> None:
    message = chain(*_steps("q", 60), idempotency_key="k").to_proto()
    sent = parts(message, SMALL.max_message_bytes)
    assert len(sent) >= 4
    assert all(p.ByteSize() <= SMALL.max_message_bytes for p in sent)
    assert [n for p in sent for n in p.nodes] == list(message.nodes)
    assert [p.idempotency_key for p in sent] == ["k"] + [""] * (len(sent) - 1)
    assert parts(message, message.ByteSize()) == [message]       # at the cap: one message
    assert len(parts(message, message.ByteSize() - 1)) > 1      # one byte under it: parts


def test_a_node_too_large_for_any_message_is_refused_unsent() -> None:
    message = chain(EnqueueRequest("q", "a"), EnqueueRequest("q", "b", payload=Payload(b"x" * 40_000))).to_proto()
    with pytest.raises(MessageTooLarge, match="workflow node 1 alone exceeds"):
        parts(message, SMALL.max_message_bytes)


def test_a_chain_sent_in_parts_is_one_workflow_that_runs_in_order(shared_server: ServerProcess, wire: Wire) -> None:
    q = _queue()
    with Client(shared_server.grpc_target, options=SMALL) as c:
        ack = c.enqueue_workflow(chain(*_steps(q, 40), idempotency_key=f"k-{q}"))
        again = c.enqueue_workflow(chain(*_steps(q, 40), idempotency_key=f"k-{q}"))
    ids = [a.job_id for a in ack.acks]
    assert again.deduplicated and [a.job_id for a in again.acks] == ids
    assert [int(wire.get_job(i).state) for i in ids[:2]] == [State.READY, State.DEFERRED]
    ran = []
    for _ in ids:
        res = wire.reserve_one([q], wait=5.0)
        ran.append(res.job.id)
        wire.ack(res)
    assert ran == ids


def test_the_async_client_sends_parts_too(shared_server: ServerProcess, wire: Wire) -> None:
    q = _queue()

    async def main() -> WorkflowAck:
        async with AsyncClient(shared_server.grpc_target, options=SMALL) as c:
            return await c.enqueue_workflow(group(_steps(q, 30)))

    ack = asyncio.run(main())
    assert len(ack.acks) == 30
    assert len(wire.reserve([q], 30)) == 30


def _stream(shared_server: ServerProcess, messages: list[ppb.EnqueueWorkflowRequest]) -> grpc.RpcError:
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        stub = producer_pb2_grpc.ProducerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.EnqueueWorkflowParts(iter(messages), timeout=60)
    return info.value


def test_the_server_counts_nodes_over_every_part(shared_server: ServerProcess, wire: Wire) -> None:
    q = _queue()
    node = ppb.WorkflowNode(job=EnqueueRequest(q, "t").to_proto())
    half = ppb.EnqueueWorkflowRequest(nodes=[node] * (MAX_WORKFLOW_NODES // 2))
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        stub = producer_pb2_grpc.ProducerServiceStub(channel)
        ok = stub.EnqueueWorkflowParts(iter([half, half]), timeout=120)  # 10,000: the limit
    assert len(ok.acks) == MAX_WORKFLOW_NODES
    over = ppb.EnqueueWorkflowRequest(nodes=[node])
    error = _stream(shared_server, [half, half, over])                  # 10,001: one past
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "at most 10000 nodes" in (error.details() or "")
    other = _queue()
    first = ppb.EnqueueWorkflowRequest(nodes=[ppb.WorkflowNode(job=EnqueueRequest(other, "t").to_proto())],
                                       idempotency_key="a")
    second = ppb.EnqueueWorkflowRequest(nodes=list(first.nodes), idempotency_key="b")
    error = _stream(shared_server, [first, second])
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "idempotency key" in (error.details() or "")
    assert wire.reserve([other]) == []  # nothing stored


def test_a_part_that_cannot_be_decoded_is_invalid_argument(shared_server: ServerProcess) -> None:
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        call = channel.stream_unary("/sepp.api.v1.ProducerService/EnqueueWorkflowParts",
                                    request_serializer=lambda b: b,
                                    response_deserializer=ppb.EnqueueWorkflowResponse.FromString)
        with pytest.raises(grpc.RpcError) as info:
            call(iter([b"\xff\xff\xff"]), timeout=60)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed request part" in (info.value.details() or "")
