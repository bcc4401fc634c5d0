"""The workflow page's drawing, laid out on the server (docs/workflows.md "Seeing and steering
a workflow"): each node a box in the column of its depth (a root in column 0, a node one column
right of its deepest parent), rows in node order, an SVG line per edge; a workflow of more than
``MAX_DRAWN`` nodes is summarised by job type instead. Pure functions of a ``WorkflowView``;
sizes in SVG user units (CSS pixels)."""

from __future__ import annotations

from dataclasses import dataclass

from sepp.domain.admin import StateCounts
from sepp.domain.ids import job_id_text
from sepp.domain.workflows import counts_of
from sepp.server.admin.workflows import WorkflowView
from sepp.server.http.ui.views import SLUG_OF

#: Most nodes drawn one by one; a larger workflow is summarised by job type.
MAX_DRAWN = 300
#: Column and row pitch, and a node box's size.
COL_W, ROW_H, BOX_W, BOX_H = 200, 40, 170, 28


@dataclass(frozen=True, slots=True)
class Box:
    """One node drawn: its index, job id (text), the label shown (index and job type), the
    CSS slug of its state (``dead-lettered``) and its top-left corner."""

    index: int
    job_id: str
    label: str
    state: str
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Graph:
    """The drawing: boxes, lines (x1, y1, x2, y2: parent's right edge to child's left edge)
    and the picture's size."""

    boxes: list[Box]
    lines: list[tuple[int, int, int, int]]
    width: int
    height: int


def depths(after: list[list[int]]) -> list[int]:
    """Each node's depth: 0 for a node that runs after none of the workflow's, else one more
    than its deepest parent (edges may point either way in the node order; the graph is
    acyclic)."""
    n = len(after)
    children: list[list[int]] = [[] for _ in range(n)]
    left = [len(set(ps)) for ps in after]
    for i, ps in enumerate(after):
        for p in set(ps):
            children[p].append(i)
    depth = [0] * n
    order = [i for i in range(n) if not left[i]]
    k = 0
    while k < len(order):
        i = order[k]
        for c in children[i]:
            depth[c] = max(depth[c], depth[i] + 1)
            left[c] -= 1
            if not left[c]:
                order.append(c)
        k += 1
    return depth


def layout(view: WorkflowView) -> Graph:
    """The drawing of ``view`` (call it for at most ``MAX_DRAWN`` nodes)."""
    after, _outside = view.edges()
    depth = depths(after)
    rows: dict[int, int] = {}
    boxes: list[Box] = []
    for i, n in enumerate(view.nodes):
        row = rows.get(depth[i], 0)
        rows[depth[i]] = row + 1
        boxes.append(Box(i, job_id_text(n.id), f"#{i} {n.job_type}"[:24], SLUG_OF.get(n.state, "unknown"),
                         8 + depth[i] * COL_W, 8 + row * ROW_H))
    lines = [(boxes[p].x + BOX_W, boxes[p].y + BOX_H // 2, boxes[i].x, boxes[i].y + BOX_H // 2)
             for i, ps in enumerate(after) for p in ps]
    width = 16 + (max(depth, default=0) + 1) * COL_W
    height = 16 + max(rows.values(), default=1) * ROW_H
    return Graph(boxes, lines, width, height)


def by_type(view: WorkflowView) -> list[tuple[str, StateCounts]]:
    """Jobs per state of each job type, in the order the types first appear."""
    seen: dict[str, list[tuple[int, int]]] = {}
    for n in view.nodes:
        seen.setdefault(n.job_type, []).append((n.state, 1))
    return [(job_type, counts_of(pairs)) for job_type, pairs in seen.items()]


__all__ = ["BOX_H", "BOX_W", "MAX_DRAWN", "Box", "Graph", "by_type", "depths", "layout"]
