"""Workflows through the engine (``EnqueueWorkflow``'s admission), on both backends: a graph
stored whole with its edges by node index, the malformed graphs refused as InvalidArgument
(an edge to no node, a node after itself, a cycle, no node, 10,001 nodes), failing nodes
refusing the whole workflow by index, and a retried workflow key answering the first ids."""

from __future__ import annotations

import uuid

import pytest

from engine.engine_kit import Harness, request
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.domain.states import State
from sepp.hard_limits import MAX_WORKFLOW_NODES
from sepp.server.errors import AtomicRejected, InvalidRequest
from sepp.server.workflows import WorkflowAck


def _nodes(*edges: list[int], queue: str = "wf") -> list[ppb.WorkflowNode]:
    """One node of ``queue`` per entry of ``edges`` (the indexes it runs after)."""
    return [ppb.WorkflowNode(job=request(queue), after=after) for after in edges]


def _ids(ack: WorkflowAck) -> list[bytes]:
    return [uuid.UUID(job_id).bytes for job_id, _ in ack.acks]


async def test_a_chain_is_stored_whole_and_runs_in_order(harness: Harness) -> None:
    ack = await harness.engine.enqueue_workflow(_nodes([], [0], [1]))
    assert not ack.deduplicated and len(ack.acks) == 3 and not any(d for _, d in ack.acks)
    ids = _ids(ack)
    assert await harness.store.workflow_jobs(uuid.UUID(ack.workflow_id).bytes) == ids
    assert [(await harness.job(i)).state for i in ids] == [State.READY, State.DEFERRED, State.DEFERRED]
    ran = []
    for _ in range(3):
        (rec,) = await harness.reserve("wf", 5)
        ran.append(rec.id)
        await harness.ack(rec)
    assert ran == ids


@pytest.mark.parametrize(("edges", "field"), [
    (([], [2]), "nodes[1].after"),          # no node 2
    (([], [1]), "nodes[1].after"),          # after itself
    (([2], [0], [1]), "nodes"),             # a cycle 0 → 2 → 1 → 0
])
async def test_malformed_graphs_are_invalid_argument_and_store_nothing(harness: Harness, edges: tuple[list[int], ...],
                                                                      field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        await harness.engine.enqueue_workflow(_nodes(*edges))
    assert err.value.field == field
    assert await harness.reserve("wf", 10) == []


async def test_node_count_at_the_limit_and_one_past(harness: Harness) -> None:
    with pytest.raises(InvalidRequest) as err:
        await harness.engine.enqueue_workflow([])
    assert err.value.field == "nodes"
    with pytest.raises(InvalidRequest) as err:
        await harness.engine.enqueue_workflow(_nodes(*([[]] * (MAX_WORKFLOW_NODES + 1))))
    assert (err.value.field, err.value.limit, err.value.actual) == ("nodes", MAX_WORKFLOW_NODES,
                                                                   MAX_WORKFLOW_NODES + 1)
    fan_in = [*([[]] * (MAX_WORKFLOW_NODES - 1)), list(range(MAX_WORKFLOW_NODES - 1))]
    ack = await harness.engine.enqueue_workflow(_nodes(*fan_in))
    assert len(ack.acks) == MAX_WORKFLOW_NODES
    assert (await harness.job(_ids(ack)[-1])).state == State.DEFERRED


async def test_invalid_nodes_reject_the_whole_workflow_by_index(harness: Harness) -> None:
    nodes = _nodes([], [0], [1])
    nodes[1].job.queue = "bad queue!"
    nodes[2].job.idempotency_key = "mine"
    ghost = str(uuid.uuid4())
    with pytest.raises(AtomicRejected) as err:
        await harness.engine.enqueue_workflow(nodes)
    assert [(f.index, f.rejection.field) for f in err.value.rejections] == [(1, "queue"), (2, "idempotency_key")]
    nodes = _nodes([], [0])
    nodes[1].job.depends_on.append(ghost)
    with pytest.raises(AtomicRejected) as err:
        await harness.engine.enqueue_workflow(nodes)
    ((failure,),) = [err.value.rejections]
    assert failure.index == 1 and failure.rejection.code == pb.RejectionCode.DEPENDENCY_NOT_FOUND
    assert ghost in failure.rejection.message
    assert await harness.reserve("wf", 10) == []


async def test_a_retried_key_returns_the_same_ids_and_stores_nothing(harness: Harness) -> None:
    first = await harness.engine.enqueue_workflow(_nodes([], [], [0, 1]), "order-7")
    again = await harness.engine.enqueue_workflow(_nodes([], [], [0, 1]), "order-7")
    assert again.deduplicated and again.workflow_id == first.workflow_id
    assert [j for j, _ in again.acks] == [j for j, _ in first.acks] and all(d for _, d in again.acks)
    assert len(await harness.reserve("wf", 10)) == 2
    other = await harness.engine.enqueue_workflow(_nodes([]), "order-8")
    assert not other.deduplicated and other.workflow_id != first.workflow_id


async def test_a_workflow_key_too_long_is_invalid(harness: Harness) -> None:
    cap = harness.parts.limits.max_idempotency_key_bytes
    await harness.engine.enqueue_workflow(_nodes([]), "k" * cap)
    with pytest.raises(InvalidRequest) as err:
        await harness.engine.enqueue_workflow(_nodes([]), "k" * (cap + 1))
    assert (err.value.field, err.value.limit, err.value.actual) == ("idempotency_key", cap, cap + 1)


async def test_nodes_on_different_queues(harness: Harness) -> None:
    nodes = [ppb.WorkflowNode(job=request("first")), ppb.WorkflowNode(job=request("second"), after=[0])]
    ack = await harness.engine.enqueue_workflow(nodes)
    a, b = _ids(ack)
    (rec,) = await harness.reserve("first")
    assert rec.id == a and await harness.reserve("second") == []
    await harness.ack(rec)
    (rec,) = await harness.reserve("second")
    assert rec.id == b
