"""``EnqueueWorkflowParts``: a workflow too large for one gRPC message, streamed in parts
and gathered here into the one graph ``EnqueueWorkflow`` stores (docs/workflows.md "A graph
larger than one message").

Each part is an ``EnqueueWorkflowRequest`` carrying the next nodes in order; a node's
``after`` indexes count over the whole graph, so the parts are simply concatenated. The
whole graph is held in memory until its one commit, so the parts are bounded while they
arrive — at most ``MAX_WORKFLOW_NODES`` nodes and ``MAX_WORKFLOW_PARTS_BYTES`` bytes in all —
and refused as soon as a part passes either, before the rest is read.
"""

from __future__ import annotations

from collections.abc import AsyncIterable

from sepp.api.v1 import producer_pb2 as ppb
from sepp.hard_limits import MAX_WORKFLOW_NODES, MAX_WORKFLOW_PARTS_BYTES
from sepp.server.errors import InvalidRequest


async def gather(parts: AsyncIterable[ppb.EnqueueWorkflowRequest]) -> tuple[list[ppb.WorkflowNode], str]:
    """The nodes of every part in order, and the workflow's idempotency key (the first
    part's; "" = none).

    Raises ``InvalidRequest``: field ``nodes`` for more than ``MAX_WORKFLOW_NODES`` nodes or
    ``MAX_WORKFLOW_PARTS_BYTES`` bytes in all (checked part by part); field
    ``idempotency_key`` for a later part naming another key than the first. No part at all,
    or parts without a node, give an empty graph, which ``enqueue_workflow`` refuses."""
    nodes: list[ppb.WorkflowNode] = []
    key: str | None = None
    size = 0
    async for part in parts:
        if key is None:
            key = part.idempotency_key
        elif part.idempotency_key and part.idempotency_key != key:
            raise InvalidRequest("every part of a workflow names the first part's idempotency key (or none)",
                                 "idempotency_key")
        size += part.ByteSize()
        if size > MAX_WORKFLOW_PARTS_BYTES:
            raise InvalidRequest(f"a workflow sent in parts is at most {MAX_WORKFLOW_PARTS_BYTES} bytes in all",
                                 "nodes", MAX_WORKFLOW_PARTS_BYTES, size)
        nodes.extend(part.nodes)
        if len(nodes) > MAX_WORKFLOW_NODES:
            raise InvalidRequest(f"a workflow holds at most {MAX_WORKFLOW_NODES} nodes", "nodes",
                                 MAX_WORKFLOW_NODES, len(nodes))
    return nodes, key or ""


__all__ = ["gather"]
