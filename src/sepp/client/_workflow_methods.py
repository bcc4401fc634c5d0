"""``enqueue_workflow``: the workflow method of ``Client`` (``SyncWorkflows``) and
``AsyncClient`` (``AsyncWorkflows``), mixed into each (docs/workflows.md "Workflows"). The
nodes are checked locally as ``enqueue_atomic``'s jobs are (when ``validate_locally``), then
sent in one ``EnqueueWorkflow`` call — or, when the graph's message is larger than
``ClientOptions.max_message_bytes``, streamed in parts in one ``EnqueueWorkflowParts`` call,
still stored in one commit or not at all (``parts``). A call with an idempotency key is
retried on transient errors (a retry cannot store the graph twice), one without is not. With tracing on, the call
is traced as ``enqueue_atomic``'s (a ``create`` span per node, one ``send`` span linking them;
``sepp._otel``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from sepp import tracing
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _core, _info, _many
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


def parts(message: ppb.EnqueueWorkflowRequest, max_bytes: int, target: str = "") -> list[ppb.EnqueueWorkflowRequest]:
    """``message`` as it is sent: itself alone when it fits ``max_bytes`` (the client's
    ``max_message_bytes``), else the parts of an ``EnqueueWorkflowParts`` stream — the nodes
    in order, as many to a part as fit ``max_bytes`` less ``_many.BATCH_HEADROOM``, the
    idempotency key on the first part.

    Raises ``MessageTooLarge`` (nothing sent) for a node too large for a message alone."""
    if message.ByteSize() <= max_bytes:
        return [message]
    limit = max_bytes - _many.BATCH_HEADROOM
    out = [ppb.EnqueueWorkflowRequest(idempotency_key=message.idempotency_key)]
    used = out[0].ByteSize()
    for index, node in enumerate(message.nodes):
        size = node.ByteSize() + 8  # the field's tag and length
        if size > limit:
            where = f" ({target})" if target else ""
            raise _many.UnsentTooLarge(
                f"workflow node {index} alone exceeds the gRPC message cap{where}: {size} bytes > "
                f"max_message_bytes {max_bytes}; nothing was sent", code=grpc.StatusCode.RESOURCE_EXHAUSTED)
        if used + size > limit and out[-1].nodes:
            out.append(ppb.EnqueueWorkflowRequest())
            used = 0
        out[-1].nodes.append(node)
        used += size
    return out


def _traced(provider: Any, workflow: Workflow, message: Any) -> Any:
    """The tracing ``Send`` of one ``EnqueueWorkflow`` call (``None`` when nothing records),
    each node's creation context written into ``message``'s node (unless the node carries
    its own ``trace_context``)."""
    tracer = tracing.tracer(provider)
    if tracer is None:
        return None
    send = tracer.send(workflow.requests, batch=True)
    for node, carrier in zip(message.nodes, send.carriers, strict=True):
        if carrier is not None:
            node.job.trace_context.update(carrier)
    return send


def _ended(send: Any, ack: WorkflowAck | None, exc: BaseException | None = None) -> None:
    """End the spans of ``send`` (``_traced``) with the call's ``ack`` or its failure ``exc``."""
    if send is None:
        return
    if exc is not None:
        send.fail(exc)
    elif ack is not None:
        send.done(ack.acks)


def _ack(response: Any, sent: int) -> WorkflowAck:
    """The ``WorkflowAck`` of ``response``; ``ServerError`` when its acks do not match the nodes."""
    ack = WorkflowAck.from_proto(response)
    if len(ack.acks) != sent:
        raise ServerError(f"the server returned {len(ack.acks)} acks for a workflow of {sent} nodes")
    return ack


class SyncWorkflows:
    """``Client.enqueue_workflow``."""

    options: Any
    target: str
    tracer_provider: Any
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
        message = workflow.to_proto(protos)
        send = _traced(self.tracer_provider, workflow, message)
        try:
            if self.options.validate_locally:
                error = _info.atomic_local_error(self._validate_protos(protos))
                if error is not None:
                    raise error
            sending = parts(message, self.options.max_message_bytes, self.target)
            keyed = bool(workflow.idempotency_key)
            if len(sending) == 1:
                response = self._call(self._stub.EnqueueWorkflow, message, idempotent=keyed)
            else:  # each try streams the parts from the first (a blocking stub wants an iterator)
                stream = self._stub.EnqueueWorkflowParts
                response = self._call(lambda ps, **kw: stream(iter(ps), **kw), sending, idempotent=keyed)
            ack = _ack(response, len(protos))
        except BaseException as exc:
            _ended(send, None, exc)
            raise
        _ended(send, ack)
        return ack


class AsyncWorkflows:
    """``AsyncClient.enqueue_workflow``."""

    options: Any
    target: str
    tracer_provider: Any
    _call: Callable[..., Awaitable[Any]]
    _validate_protos: Callable[[list[Any]], Awaitable[list[Rejection | None]]]

    async def enqueue_workflow(self, workflow: Workflow) -> WorkflowAck:
        """Enqueue a workflow all or nothing; see :meth:`sepp.Client.enqueue_workflow`."""
        protos = _checked(workflow)
        message = workflow.to_proto(protos)
        send = _traced(self.tracer_provider, workflow, message)
        try:
            if self.options.validate_locally:
                error = _info.atomic_local_error(await self._validate_protos(protos))
                if error is not None:
                    raise error
            sending = parts(message, self.options.max_message_bytes, self.target)
            if len(sending) == 1:
                response = await self._call("EnqueueWorkflow", message, idempotent=bool(workflow.idempotency_key))
            else:
                response = await self._call("EnqueueWorkflowParts", sending,
                                            idempotent=bool(workflow.idempotency_key))
            ack = _ack(response, len(protos))
        except BaseException as exc:
            _ended(send, None, exc)
            raise
        _ended(send, ack)
        return ack


__all__ = ["AsyncWorkflows", "SyncWorkflows"]
