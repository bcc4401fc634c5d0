"""Workflows: many jobs and their edges, sent in one all-or-nothing call
(``Client.enqueue_workflow``; docs/workflows.md "Workflows").

``Workflow`` collects nodes — each an ``EnqueueRequest``, or a task call's signature
(``task.s(...)``: anything with a ``request()`` method returning one) — and the nodes each
runs after. ``chain``, ``group`` and ``chord`` build the common shapes. No I/O here: the
client turns a ``Workflow`` into the ``EnqueueWorkflowRequest`` (``to_proto``) and its answer
into a ``WorkflowAck``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sepp.api.v1 import producer_pb2 as ppb
from sepp.hard_limits import MAX_WORKFLOW_NODES
from sepp.request import EnqueueRequest
from sepp.request.results import EnqueueAck


@runtime_checkable
class HasRequest(Protocol):
    """A task call not sent yet (``sepp.tasks.Signature``): its ``request()`` is the job."""

    def request(self) -> EnqueueRequest:
        """The ``EnqueueRequest`` of the call."""


@runtime_checkable
class ReceivesResults(Protocol):
    """A task call that can receive what its dependencies returned as its first argument
    (``sepp.tasks.Signature``; docs/tasks.md "Chains pass results")."""

    def request_receiving(self, prepend: str) -> EnqueueRequest:
        """The ``EnqueueRequest`` of the call as a step receiving ``"result"`` (a chain step)
        or ``"results"`` (a chord callback)."""


#: What a node can be built from.
NodeSpec = EnqueueRequest | HasRequest


@dataclass(frozen=True, slots=True)
class Node:
    """A node of one ``Workflow``: ``index`` is its position (the order of ``Workflow.add``,
    and of ``WorkflowAck.acks``)."""

    index: int
    workflow_tag: int


@dataclass(frozen=True, slots=True)
class WorkflowAck:
    """A stored workflow (or the earlier one its idempotency key named).

    Attributes:
        workflow_id: The workflow's id (canonical UUID text), stored on each of its jobs.
        deduplicated: True when ``idempotency_key`` named a workflow stored before: nothing
            new was stored, ``workflow_id`` and ``acks`` are the earlier call's.
        acks: One ``EnqueueAck`` per node, in node order (``Workflow.add`` order; a ``chain``:
            its steps; a ``chord``: its children, then the callback).
    """

    workflow_id: str
    deduplicated: bool
    acks: tuple[EnqueueAck, ...]

    @classmethod
    def from_proto(cls, msg: ppb.EnqueueWorkflowResponse) -> WorkflowAck:
        """Build from a wire ``EnqueueWorkflowResponse``."""
        return cls(msg.workflow_id, bool(msg.deduplicated), tuple(EnqueueAck.from_proto(a) for a in msg.acks))


def as_request(spec: NodeSpec, prepend: str | None = None) -> EnqueueRequest:
    """The ``EnqueueRequest`` of ``spec`` (a request, or a task signature's ``request()``; with
    ``prepend``, of a task call receiving its dependencies' results: ``ReceivesResults``);
    ``TypeError`` for anything else. Also what ``Job.enqueue_children`` takes."""
    if isinstance(spec, EnqueueRequest):
        return spec
    if prepend is not None and isinstance(spec, ReceivesResults):
        req = spec.request_receiving(prepend)
        if isinstance(req, EnqueueRequest):
            return req
    if callable(getattr(spec, "s", None)) and callable(getattr(spec, "si", None)):  # a task, not a call of it
        name = getattr(spec, "__name__", "task")
        raise TypeError(f"a workflow node is a call of a task, not the task {getattr(spec, 'job_type', name)!r} "
                        f"itself: add {name}.s(...) or {name}.si(...)")
    if isinstance(spec, HasRequest):
        req = spec.request()
        if isinstance(req, EnqueueRequest):
            return req
    raise TypeError(f"a workflow node is an EnqueueRequest or a task signature (task.s(...)), "
                    f"not {type(spec).__name__}")


class Workflow:
    """A graph of jobs to enqueue in one all-or-nothing call (``Client.enqueue_workflow``).

    ``add(spec, after=[...])`` adds a node that runs once every node of ``after`` (returned
    by earlier ``add`` calls of this workflow) is COMPLETED; what it does when one fails is its
    request's ``on_dependency_failure``. At most 10,000 nodes (``ValueError`` past that).
    ``idempotency_key``: a retried send with the same key returns the first one's ids
    (``WorkflowAck.deduplicated``) instead of storing the graph again; a node's own request
    must carry no idempotency key (the server refuses it).
    """

    def __init__(self, *, idempotency_key: str = "") -> None:
        self.idempotency_key = idempotency_key
        self._requests: list[EnqueueRequest] = []
        self._after: list[list[int]] = []
        self._tag = id(self)

    def add(self, spec: NodeSpec, after: Iterable[Node] = (), *, prepend: str | None = None) -> Node:
        """Add a node; return its handle. ``after``: nodes of this workflow it waits for.
        ``prepend``: for a mutable task signature (``task.s``), what it receives as its first
        argument when it runs — ``"result"``, the result of its first dependency (``after[0]``),
        as a ``chain`` step; ``"results"``, the list of all its dependencies' results in
        order, as a ``chord`` callback (docs/tasks.md "Chains pass results"). None (the
        default), an ``EnqueueRequest`` or a ``.si`` signature: nothing is passed (a handler
        reads ``job.dependency_results()``).
        Raises ``TypeError`` (not a request or signature; a signature that cannot take one
        more first argument), ``ValueError`` (a node of another workflow, more than 10,000
        nodes, another ``prepend``)."""
        if prepend not in (None, "result", "results"):
            raise ValueError(f'prepend is "result", "results" or None, not {prepend!r}')
        request = as_request(spec, prepend)
        parents: list[int] = []
        for node in after:
            if not isinstance(node, Node) or node.workflow_tag != self._tag:
                raise ValueError(f"after= takes nodes this workflow's add() returned, not {node!r}")
            parents.append(node.index)
        if len(self._requests) >= MAX_WORKFLOW_NODES:
            raise ValueError(f"a workflow holds at most {MAX_WORKFLOW_NODES} nodes")
        self._requests.append(request)
        self._after.append(parents)
        return Node(len(self._requests) - 1, self._tag)

    def __len__(self) -> int:
        return len(self._requests)

    @property
    def requests(self) -> Sequence[EnqueueRequest]:
        """Every node's request, in node order."""
        return tuple(self._requests)

    def after_of(self, node: Node | int) -> list[int]:
        """The indexes of the nodes ``node`` runs after."""
        return list(self._after[node if isinstance(node, int) else node.index])

    def to_proto(self, protos: Sequence[object] | None = None) -> ppb.EnqueueWorkflowRequest:
        """The wire ``EnqueueWorkflowRequest``; ``protos``: the nodes' ``EnqueueRequest``
        messages when the caller made them already (in node order)."""
        msgs = protos if protos is not None else [r.to_proto() for r in self._requests]
        nodes = [ppb.WorkflowNode(job=m, after=a) for m, a in zip(msgs, self._after, strict=True)]  # type: ignore[arg-type]
        return ppb.EnqueueWorkflowRequest(nodes=nodes, idempotency_key=self.idempotency_key)


def chain(*steps: NodeSpec, idempotency_key: str = "") -> Workflow:
    """A workflow running ``steps`` one after another: each after the one before it. A step
    built with ``task.s(...)`` after the first receives the result of the step before it as
    its first argument (Celery's rule; ``task.si(...)``: nothing). Raises ``TypeError`` for
    such a step that cannot take one more first argument."""
    wf = Workflow(idempotency_key=idempotency_key)
    last: Node | None = None
    for step in steps:
        last = wf.add(step, after=() if last is None else (last,), prepend=None if last is None else "result")
    return wf


def group(specs: Iterable[NodeSpec], *, idempotency_key: str = "") -> Workflow:
    """A workflow of independent jobs (no edges) under one workflow id."""
    wf = Workflow(idempotency_key=idempotency_key)
    for spec in specs:
        wf.add(spec)
    return wf


def chord(header: Iterable[NodeSpec], callback: NodeSpec, *, idempotency_key: str = "") -> Workflow:
    """A workflow of ``header`` jobs and a ``callback`` that runs after all of them (acks: the
    header's in order, then the callback's). A callback built with ``task.s(...)`` receives
    the list of the header's results, in header order, as its first argument (Celery's rule;
    ``task.si(...)``: nothing). Raises ``TypeError`` for such a callback that cannot take one
    more first argument."""
    wf = Workflow(idempotency_key=idempotency_key)
    children = [wf.add(spec) for spec in header]
    wf.add(callback, after=children, prepend="results")
    return wf


__all__ = ["HasRequest", "Node", "NodeSpec", "ReceivesResults", "Workflow", "WorkflowAck", "as_request", "chain",
           "chord", "group"]
