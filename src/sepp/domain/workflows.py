"""What the admin side reads of a stored workflow (docs/workflows.md "Seeing and steering a
workflow"): ``WorkflowSummary`` (one workflow in a listing), ``WorkflowNode`` (one of its jobs,
with its edges) and ``WorkflowCancel`` (what a cancel of a whole workflow did).

A workflow is the set of jobs stored by one ``EnqueueWorkflow`` call, which carry its id
(``jobs.workflow_id``). It has no row of its own: what is shown of it is read from its jobs, so a
workflow whose jobs were all purged after their retention is gone. Ids are 16-byte blobs,
times µs since the Unix epoch (UTC), states the ``State`` numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sepp.domain.admin import StateCounts
from sepp.domain.records import attempt_entries
from sepp.domain.states import FINISHED, State

_FINISHED = frozenset(int(s) for s in FINISHED)
_FAILED = frozenset((int(State.DEAD_LETTERED), int(State.CANCELLED)))
#: ``StateCounts`` field of each state number.
_FIELD = {int(s): s.name.lower() for s in State}


def counts_of(pairs: Iterable[tuple[int, int]]) -> StateCounts:
    """``StateCounts`` from (state number, count) pairs, the counts of a state repeated added
    up; an unknown state number (a damaged row, a newer schema) is left out."""
    fields: dict[str, int] = {}
    for s, n in pairs:
        if s in _FIELD:
            fields[_FIELD[s]] = fields.get(_FIELD[s], 0) + n
    return StateCounts(**fields)


def counts_terminal(counts: StateCounts) -> bool:
    """Whether every job counted in ``counts`` is COMPLETED, DEAD_LETTERED or CANCELLED (a
    workflow is terminal then: none of its nodes will change state on its own)."""
    return counts.scheduled + counts.ready + counts.reserved + counts.deferred == 0


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """One workflow in a listing: its 16-byte id, when its jobs were enqueued (µs UTC, the
    earliest ``enqueued_at`` of its stored jobs) and its stored jobs per state."""

    workflow_id: bytes
    created_at: int
    counts: StateCounts

    @property
    def nodes(self) -> int:
        """How many of its jobs are stored (all of them until some are purged)."""
        return self.counts.total

    @property
    def terminal(self) -> bool:
        """Every stored node is COMPLETED, DEAD_LETTERED or CANCELLED (``counts_terminal``)."""
        return counts_terminal(self.counts)


@dataclass(frozen=True, slots=True)
class WorkflowNode:
    """One stored job of a workflow as its page draws it. ``depends_on`` are the ids it was
    enqueued with (its parents in the workflow and any stored job it named, in order);
    ``reason`` the dead-letter or cancel reason of a finished job ("" otherwise);
    ``last_error`` the error message of the last attempt that recorded one (read for a
    DEAD_LETTERED job only, "" otherwise); ``cancel_requested``: an admin asked to cancel it
    while it ran."""

    id: bytes
    seq: int
    queue: str
    job_type: str
    state: int
    depends_on: tuple[bytes, ...]
    reason: str
    last_error: str
    enqueued_at: int
    finished_at: int | None
    cancel_requested: bool
    #: Attempts started (0 before its first run).
    attempt: int = 0

    @property
    def finished(self) -> bool:
        """COMPLETED, DEAD_LETTERED or CANCELLED."""
        return self.state in _FINISHED

    @property
    def failed(self) -> bool:
        """DEAD_LETTERED or CANCELLED: what ``GetWorkflow`` lists among the failed nodes."""
        return self.state in _FAILED


def last_error_of(state: int, history: str | None) -> str:
    """The error message of the last attempt of ``history`` (a job's attempt history column)
    that recorded one; "" when none did or the column cannot be read."""
    for entry in reversed(attempt_entries(state, history, 0, None, None, None, None)):
        if entry.get("error_message"):
            return str(entry["error_message"])
    return ""


@dataclass(frozen=True, slots=True)
class WorkflowCancel:
    """What ``Store.cancel_workflow`` did, in one commit: ``cancelled`` the 16-byte ids of the
    nodes it moved to CANCELLED (SCHEDULED, READY or DEFERRED ones), ``requested`` those it
    asked to stop (RESERVED: ``cancel_requested`` set, as a job cancel does), ``queues`` the
    queues of the cancelled ones; ``found`` False when no job carries the workflow's id."""

    found: bool
    cancelled: Sequence[bytes]
    requested: Sequence[bytes]
    queues: Sequence[str]


def children_first(nodes: Sequence[tuple[bytes, Sequence[bytes]]]) -> list[int]:
    """The indexes of ``nodes`` ((id, the ids it depends on) each) ordered so that every node
    comes before the nodes it depends on: a workflow cancel walks them so, and each node is
    cancelled itself (naming the cancel's reason) before a parent's cancel could cancel it
    as a failed dependency. Edges to ids outside ``nodes`` are ignored; the graph is acyclic
    (ids are assigned at the enqueue)."""
    index = {node_id: i for i, (node_id, _deps) in enumerate(nodes)}
    children_left = [0] * len(nodes)
    parents: list[list[int]] = []
    for _node_id, deps in nodes:
        mine = sorted({index[d] for d in deps if d in index})
        parents.append(mine)
        for p in mine:
            children_left[p] += 1
    order = [i for i in range(len(nodes) - 1, -1, -1) if not children_left[i]]
    k = 0
    while k < len(order):
        for p in parents[order[k]]:
            children_left[p] -= 1
            if not children_left[p]:
                order.append(p)
        k += 1
    return order


__all__ = ["WorkflowCancel", "WorkflowNode", "WorkflowSummary", "children_first", "counts_of", "counts_terminal",
           "last_error_of"]
