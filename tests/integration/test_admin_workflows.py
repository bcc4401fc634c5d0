"""Admin API, workflows, over the wire against a real ``sepp serve`` (docs/workflows.md
"Seeing and steering a workflow"): ``ListWorkflows`` newest first and paged, ``GetWorkflow``
with nodes, edges and failed nodes, ``CancelWorkflow`` of a whole workflow, and the refusals."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import duration_pb2
from support.admin import AdminStubs, connect
from support.failures import fails as refusal

from sepp import Client, EnqueueRequest, Workflow, chain, chord
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

UNKNOWN = "01900000-0000-7000-8000-000000000000"


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.grpc_target) as c:
        yield c


@pytest.fixture
def stubs(shared_server: ServerProcess) -> Iterator[AdminStubs]:
    with connect(shared_server.grpc_target) as s:
        yield s


def _queue() -> str:
    return f"wfa-{uuid.uuid4().hex[:8]}"


def _list(stubs: AdminStubs, page_size: int) -> list[apb.WorkflowSummary]:
    out: list[apb.WorkflowSummary] = []
    token = ""
    while True:
        page = stubs.call("ListWorkflows", apb.ListWorkflowsRequest(page_size=page_size, page_token=token))
        assert len(page.workflows) <= page_size
        out.extend(page.workflows)
        token = page.next_page_token
        if not token:
            return out


def test_list_is_newest_first_paged_and_counts_states(client: Client, stubs: AdminStubs) -> None:
    q = _queue()
    ids = [client.enqueue_workflow(chain(*[EnqueueRequest(q, "step") for _ in range(k + 1)])).workflow_id
           for k in range(3)]
    for size in (1, 2, 3, 1000):
        listed = [w.workflow_id for w in _list(stubs, size)]
        mine = [w for w in listed if w in ids]
        assert mine == ids[::-1], size
    first = stubs.call("ListWorkflows", apb.ListWorkflowsRequest(page_size=1))
    top = first.workflows[0]
    assert (top.nodes, top.counts.ready, top.counts.deferred, top.terminal) == (3, 1, 2, False)
    assert top.created_at.seconds > 0 and first.next_page_token
    for bad in (-1, 1001):
        failure = refusal(lambda b=bad: stubs.call("ListWorkflows", apb.ListWorkflowsRequest(page_size=b)))
        assert (failure.code, failure.metadata["field"]) == (grpc.StatusCode.INVALID_ARGUMENT, "page_size")
    failure = refusal(lambda: stubs.call("ListWorkflows", apb.ListWorkflowsRequest(page_token="nope")))
    assert (failure.code, failure.metadata["field"]) == (grpc.StatusCode.INVALID_ARGUMENT, "page_token")


def test_get_shows_nodes_edges_and_why_a_node_failed(client: Client, stubs: AdminStubs) -> None:
    q = _queue()
    ack = client.enqueue_workflow(chord([EnqueueRequest(q, "part") for _ in range(2)], EnqueueRequest(q, "sum")))
    part0, part1, total = (a.job_id for a in ack.acks)
    (r,) = stubs.reserve(q)  # the first node in enqueue order
    assert r.job.id == part0
    stubs.worker.Nack(wpb.NackRequest(job_id=part0, lease_id=r.lease_id, dead_letter="boom",
                                      error=wpb.JobError(message="it broke")), timeout=10)
    info = stubs.call("GetWorkflow", apb.GetWorkflowRequest(workflow_id=ack.workflow_id))
    assert [n.job_id for n in info.nodes] == [part0, part1, total]
    assert [list(n.after) for n in info.nodes] == [[], [], [0, 1]]
    assert [n.state for n in info.nodes] == [pb.DEAD_LETTERED, pb.READY, pb.CANCELLED]
    assert list(info.failed) == [0, 2]
    assert info.nodes[0].last_error == "it broke" and info.nodes[0].reason.startswith("NACK_DEAD_LETTER")
    assert info.nodes[2].reason == f"DEPENDENCY_FAILED: dependency {part0} was dead-lettered"
    assert (info.summary.nodes, info.summary.counts.dead_lettered, info.summary.counts.cancelled) == (3, 1, 1)
    missing = refusal(lambda: stubs.call("GetWorkflow", apb.GetWorkflowRequest(workflow_id=UNKNOWN)))
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "WORKFLOW_NOT_FOUND")
    bad = refusal(lambda: stubs.call("GetWorkflow", apb.GetWorkflowRequest(workflow_id="x")))
    assert (bad.code, bad.metadata["field"]) == (grpc.StatusCode.INVALID_ARGUMENT, "workflow_id")


def test_cancel_cancels_the_unfinished_nodes_and_asks_running_ones(client: Client, stubs: AdminStubs) -> None:
    q = _queue()
    wf = Workflow()
    a = wf.add(EnqueueRequest(q, "a"))
    b = wf.add(EnqueueRequest(q, "b"), after=[a])
    wf.add(EnqueueRequest(q, "c"), after=[b])
    ack = client.enqueue_workflow(wf)
    (running,) = stubs.reserve(q, 10)
    assert running.job.id == ack.acks[0].job_id
    done = stubs.call("CancelWorkflow", apb.CancelWorkflowRequest(workflow_id=ack.workflow_id))
    assert (done.cancelled, done.cancel_requested) == (2, 1)
    assert (done.summary.counts.cancelled, done.summary.counts.reserved, done.summary.terminal) == (2, 1, False)
    info = stubs.call("GetWorkflow", apb.GetWorkflowRequest(workflow_id=ack.workflow_id))
    reason = f"WORKFLOW_CANCELLED: workflow {ack.workflow_id} was cancelled by an admin"
    assert [n.reason for n in info.nodes[1:]] == [reason, reason]
    assert info.nodes[0].cancel_requested and info.nodes[0].state == pb.RESERVED
    # the worker learns it, and a nack afterwards makes the workflow terminal
    ext = stubs.worker.ExtendLease(wpb.ExtendLeaseRequest(job_id=running.job.id, lease_id=running.lease_id,
                                                          extend_by=duration_pb2.Duration(seconds=30)),
                                   timeout=10)
    assert ext.cancel_requested
    stubs.worker.Nack(wpb.NackRequest(job_id=running.job.id, lease_id=running.lease_id,
                                      release=wpb.ReleaseDirective()), timeout=10)
    again = stubs.call("CancelWorkflow", apb.CancelWorkflowRequest(workflow_id=ack.workflow_id, reason="again"))
    assert (again.cancelled, again.cancel_requested, again.summary.terminal) == (0, 0, True)
    missing = refusal(lambda: stubs.call("CancelWorkflow", apb.CancelWorkflowRequest(workflow_id=UNKNOWN)))
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "WORKFLOW_NOT_FOUND")
