"""Workflow admission: ``EnqueueWorkflow`` — a graph of jobs (nodes) and their edges (by
node index) validated whole, then stored in one commit by ``Store.enqueue_workflow``, or
nothing (docs/workflows.md "Workflows").

Malformed graphs (no node, more than ``MAX_WORKFLOW_NODES``, an edge to no node, a node after
itself, a cycle, a workflow key too long) are ``InvalidRequest`` naming the field; nodes that
fail their own checks are ``AtomicRejected`` listing every failing index, as for
``EnqueueAtomic``. Errors are ``sepp.server.errors`` exceptions mapped to the wire by
``rpc.status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import uuid_utils

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.domain.ids import job_id_text
from sepp.hard_limits import MAX_WORKFLOW_NODES
from sepp.rejections import RejectionCode
from sepp.server.admission import POLICY_OF, Ack, Admission, dependency_rejection
from sepp.server.errors import AtomicRejected, InvalidRequest
from sepp.storage.dependencies import CANCEL
from sepp.storage.errors import DependencyMissing
from sepp.storage.workflows import WorkflowClaim
from sepp.validation import server_fix

_IA = RejectionCode.INVALID_ARGUMENT.to_wire()


class WorkflowAck(NamedTuple):
    """What ``enqueue_workflow`` answers: the workflow's id (UUID text), whether a live
    idempotency key named an earlier workflow (then nothing was stored), and one
    ``(job id text, deduplicated)`` per node in node order."""

    workflow_id: str
    deduplicated: bool
    acks: list[Ack]


def graph_order(nodes: Sequence[ppb.WorkflowNode]) -> tuple[list[int], list[list[int]]]:
    """A topological order of ``nodes`` (parents before children; among nodes free at once,
    the lower index first) and each node's parents (distinct, in the order first given).
    Raises ``InvalidRequest``: an edge to no node (field ``nodes[i].after``), a node after
    itself, or a cycle (field ``nodes``, naming a node on it)."""
    n = len(nodes)
    parents: list[list[int]] = []
    children: list[list[int]] = [[] for _ in range(n)]
    for i, node in enumerate(nodes):
        mine = list(dict.fromkeys(node.after))
        for p in mine:
            if p >= n:
                raise InvalidRequest(f"node {i} runs after node {p}, but the workflow has {n} nodes (0..{n - 1})",
                                     f"nodes[{i}].after", n - 1, p)
            if p == i:
                raise InvalidRequest(f"node {i} runs after itself", f"nodes[{i}].after", None, p)
            children[p].append(i)
        parents.append(mine)
    left = [len(ps) for ps in parents]
    order = [i for i in range(n) if not left[i]]
    k = 0
    while k < len(order):
        for c in children[order[k]]:
            left[c] -= 1
            if not left[c]:
                order.append(c)
        k += 1
    if len(order) < n:
        stuck = next(i for i in range(n) if left[i])
        raise InvalidRequest(f"the workflow's edges make a cycle: {n - len(order)} nodes wait for each other "
                             f"(node {stuck} among them)", "nodes", None, stuck)
    return order, parents


class WorkflowAdmission:
    """``enqueue_workflow`` on top of an ``Admission`` (its validator, row builder, store and
    the tellings after a commit)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def _key(self, key: str) -> None:
        """Refuse a workflow idempotency key longer than the server's ``max_idempotency_key_bytes``."""
        cap = self.admission.limits.max_idempotency_key_bytes
        size = len(key.encode())
        if size > cap:
            raise InvalidRequest(f"the workflow's idempotency key is too long{server_fix('max_idempotency_key_bytes')}",
                                 "idempotency_key", cap, size)

    async def enqueue_workflow(self, nodes: Sequence[ppb.WorkflowNode], key: str = "") -> WorkflowAck:
        """Validate the graph and its nodes; store every node in one commit with its edges and
        the workflow's id, or nothing. ``key`` ("" = none): a live claim of it answers the
        earlier workflow's ids (``deduplicated``) and stores nothing; otherwise it is held for
        the longest ``dedup_window`` of the nodes' queues.

        Raises ``InvalidRequest`` (malformed graph or key, see the module), ``AtomicRejected``
        (every failing node by index: its own checks, an idempotency key on a node, a
        ``depends_on`` id of no stored job) or ``BacklogFull``."""
        adm = self.admission
        n = len(nodes)
        if n == 0:
            raise InvalidRequest("a workflow needs at least one node", "nodes", MAX_WORKFLOW_NODES, 0)
        if n > MAX_WORKFLOW_NODES:
            raise InvalidRequest(f"a workflow holds at most {MAX_WORKFLOW_NODES} nodes", "nodes",
                                 MAX_WORKFLOW_NODES, n)
        if key:
            self._key(key)
        order, parents = graph_order(nodes)
        now = adm._clock_now()
        now_ns = now * 1000
        adm.queues.begin_admission()
        reqs = [node.job for node in nodes]
        verdicts = [adm.validator.check(req, now_ns) for req in reqs]
        failures: list[pb.IndexedRejection] = []
        for i, (req, verdict) in enumerate(zip(reqs, verdicts, strict=True)):
            if type(verdict) is pb.Rejection:
                failures.append(pb.IndexedRejection(index=i, rejection=verdict))
            elif req.idempotency_key:
                failures.append(pb.IndexedRejection(index=i, rejection=pb.Rejection(
                    code=_IA, field="idempotency_key",  # type: ignore[arg-type]
                    message="a node of a workflow has no idempotency key of its own: set the workflow's")))
        if failures:
            adm.events.rejected([(reqs[f.index].queue, f.rejection) for f in failures])
            raise AtomicRejected(failures)
        adm._check_backlog(n)  # before and after the ids: see Admission.enqueue
        uids = await adm.store.new_job_ids(n)
        adm._check_backlog(n)
        rows, new_queues, custom, deps = adm.build_rows(reqs, verdicts, uids, now)
        depends_on: dict[int, list[bytes]] = {}
        for i in order:  # topological: the store plans a node's parents of the call before it
            ids = [uids[p].bytes for p in parents[i]]
            ids.extend(d for d in deps.get(i, ()) if d not in ids)
            if ids:
                depends_on[i] = ids
                if i not in deps.policies and reqs[i].on_dependency_failure:  # a node with edges only
                    policy = POLICY_OF.get(reqs[i].on_dependency_failure, CANCEL)
                    if policy != CANCEL:
                        deps.policies[i] = policy
        until = now + max(adm.queues.get(row.queue).dedup_us for row in rows) if key else 0  # type: ignore[union-attr]
        workflow_id = uuid_utils.uuid7()
        try:
            earlier = await adm.store.enqueue_workflow(rows, [0] * n, now, new_queues, custom, depends_on,
                                                       deps.policies, WorkflowClaim(workflow_id.bytes, key, until))
        except DependencyMissing as exc:
            failures = [pb.IndexedRejection(index=i, rejection=dependency_rejection(dep))
                        for i, dep in sorted(exc.missing.items())]
            adm.events.rejected([(reqs[f.index].queue, f.rejection) for f in failures])
            raise AtomicRejected(failures) from None
        if earlier is not None:
            return WorkflowAck(job_id_text(earlier.workflow_id), True,
                               [(job_id_text(j), True) for j in earlier.job_ids])
        adm.stored(rows, {}, new_queues)
        return WorkflowAck(str(workflow_id), False, [(str(u), False) for u in uids])


__all__ = ["WorkflowAck", "WorkflowAdmission", "graph_order"]
