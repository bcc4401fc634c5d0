"""The workflow messages of ``AdminService`` (docs/workflows.md "Seeing and steering a
workflow"): ``WorkflowSummary``, ``WorkflowInfo`` and the cancel's answer built from what
``sepp.server.admin.workflows`` reads."""

from __future__ import annotations

from sepp.api.v1 import admin_pb2 as apb
from sepp.domain.admin import StateCounts
from sepp.domain.ids import job_id_text
from sepp.domain.workflows import WorkflowCancel, WorkflowSummary
from sepp.server.admin.workflows import WorkflowView
from sepp.server.rpc.convert import set_ts, ts


def counts_proto(c: StateCounts) -> apb.WorkflowStateCounts:
    """Jobs per state as ``WorkflowStateCounts``."""
    return apb.WorkflowStateCounts(scheduled=c.scheduled, ready=c.ready, reserved=c.reserved, completed=c.completed,
                                   dead_lettered=c.dead_lettered, cancelled=c.cancelled, deferred=c.deferred)


def summary_proto(s: WorkflowSummary) -> apb.WorkflowSummary:
    """One workflow of a listing."""
    return apb.WorkflowSummary(workflow_id=job_id_text(s.workflow_id), created_at=ts(s.created_at), nodes=s.nodes,
                               counts=counts_proto(s.counts), terminal=s.terminal)


def workflow_proto(view: WorkflowView) -> apb.WorkflowInfo:
    """One workflow with its nodes in node order, their edges as node indexes, and the
    indexes of its failed nodes."""
    after, outside = view.edges()
    out = apb.WorkflowInfo(summary=summary_proto(view.summary), failed=view.failed())
    for n, parents, external in zip(view.nodes, after, outside, strict=True):
        node = out.nodes.add(job_id=job_id_text(n.id), queue=n.queue, job_type=n.job_type, state=n.state,  # type: ignore[arg-type]
                             after=parents, external_dependencies=[job_id_text(d) for d in external],
                             reason=n.reason, last_error=n.last_error, cancel_requested=n.cancel_requested)
        if n.finished_at is not None:
            set_ts(node.finished_at, n.finished_at)
    return out


def cancel_proto(done: WorkflowCancel, view: WorkflowView) -> apb.CancelWorkflowResponse:
    """What ``CancelWorkflow`` answers: the counts of what it did and the workflow after it."""
    return apb.CancelWorkflowResponse(cancelled=len(done.cancelled), cancel_requested=len(done.requested),
                                      summary=summary_proto(view.summary))


__all__ = ["cancel_proto", "counts_proto", "summary_proto", "workflow_proto"]
