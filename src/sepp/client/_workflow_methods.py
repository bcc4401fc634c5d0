"""``enqueue_workflow``: the workflow method of ``Client`` (``SyncWorkflows``) and
``AsyncClient`` (``AsyncWorkflows``), mixed into each (docs/workflows.md "Workflows"). The
nodes are checked locally as ``enqueue_atomic``'s jobs are (when ``validate_locally``), then
sent in one ``EnqueueWorkflow`` call; a call with an idempotency key is retried on transient
errors (a retry cannot store the graph twice), one without is not."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sepp.client import _core, _info
from sepp.errors import ServerError
from sepp.request import Rejection
from sepp.request.workflow import Workflow, WorkflowAck


def _checked(wf: Workflow) -> list[Any]:
    """The nodes' wire messages; ``TypeError`` for a non-``Workflow``, ``ValueError`` when empty."""
    if not isinstance(wf, Workflow):
        raise TypeError(f"expected a Workflow (Workflow(), chain, group, chord), not {type(wf).__name__}")
    if not len(wf):
        raise ValueError("a workflow needs at least one node")
    return _core.to_protos(wf.requests)


def _ack(response: Any, sent: int) -> WorkflowAck:
    """The ``WorkflowAck`` of ``response``; ``ServerError`` when its acks do not match the nodes."""
    ack = WorkflowAck.from_proto(response)
    if len(ack.acks) != sent:
        raise ServerError(f"the server returned {len(ack.acks)} acks for a workflow of {sent} nodes")
    return ack


class SyncWorkflows:
    """``Client.enqueue_workflow``."""

    options: Any
    _stub: Any
    _call: Callable[..., Any]
    _validate_protos: Callable[[list[Any]], list[Rejection | None]]

    def enqueue_workflow(self, workflow: Workflow) -> WorkflowAck:
        """Enqueue every node of ``workflow`` (``Workflow``, ``chain``, ``group``, ``chord``)
        with its edges, all or nothing, in one call. Returns a ``WorkflowAck``: the
        ``workflow_id``, ``deduplicated`` (its idempotency key named an earlier workflow: the
        ids are that one's) and one ``EnqueueAck`` per node in node order.

        Raises:
            AtomicEnqueueError: nodes were refused (``.errors``: every ``(node index,
                rejection)``); nothing was enqueued.
            RejectedError: the graph is malformed (an edge to no node, a cycle, more than
                10,000 nodes, a key too long): ``InvalidArgument``.
            TransportError: no verdict.
            TypeError, ValueError: not a workflow, or an empty one.
        """
        protos = _checked(workflow)
        if self.options.validate_locally:
            error = _info.atomic_local_error(self._validate_protos(protos))
            if error is not None:
                raise error
        response = self._call(self._stub.EnqueueWorkflow, workflow.to_proto(protos),
                              idempotent=bool(workflow.idempotency_key))
        return _ack(response, len(protos))


class AsyncWorkflows:
    """``AsyncClient.enqueue_workflow``."""

    options: Any
    _call: Callable[..., Awaitable[Any]]
    _validate_protos: Callable[[list[Any]], Awaitable[list[Rejection | None]]]

    async def enqueue_workflow(self, workflow: Workflow) -> WorkflowAck:
        """Enqueue a workflow all or nothing; see :meth:`sepp.Client.enqueue_workflow`."""
        protos = _checked(workflow)
        if self.options.validate_locally:
            error = _info.atomic_local_error(await self._validate_protos(protos))
            if error is not None:
                raise error
        response = await self._call("EnqueueWorkflow", workflow.to_proto(protos),
                                    idempotent=bool(workflow.idempotency_key))
        return _ack(response, len(protos))


__all__ = ["AsyncWorkflows", "SyncWorkflows"]
