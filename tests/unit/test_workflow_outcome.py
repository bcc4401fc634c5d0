"""A workflow's outcome under its id (``sepp.server.workflow_waits``) and the order a workflow
cancel walks its nodes (``sepp.domain.workflows.children_first``): pure functions over rows."""

from __future__ import annotations

from sepp.domain.outcomes import JobOutcome
from sepp.domain.states import State
from sepp.domain.workflows import WorkflowNode, children_first, counts_of, counts_terminal
from sepp.server.workflow_waits import workflow_outcome

WF = b"w" * 16


def _node(i: int, *parents: int) -> WorkflowNode:
    return WorkflowNode(bytes([i]) * 16, i, "q", f"t{i}", int(State.READY), tuple(bytes([p]) * 16 for p in parents),
                        "", "", 0, None, False)


def _row(node: WorkflowNode, state: State, result: bytes | None = None, reason: str = "",
         finished: int = 5) -> JobOutcome:
    return JobOutcome(node.id, "q", node.job_type, int(state), 1, finished, reason or None, None, None, None, None,
                      result, "application/json" if result else None)


def test_a_chain_completes_with_its_last_steps_result_only_when_every_node_finished() -> None:
    a, b = _node(1), _node(2, 1)
    pending = workflow_outcome(WF, [a, b], {a.id: _row(a, State.COMPLETED, b"1"), b.id: _row(b, State.READY)})
    assert pending.state == State.DEFERRED and not pending.finished
    done = workflow_outcome(WF, [a, b], {a.id: _row(a, State.COMPLETED, b"1", finished=4),
                                         b.id: _row(b, State.COMPLETED, b"2", finished=9)})
    assert (done.id, done.state, done.result, done.job_type, done.finished_at) == (WF, State.COMPLETED, b"2", "t2", 9)


def test_several_sinks_have_no_result_and_the_first_failed_node_is_named() -> None:
    a, b = _node(1), _node(2)
    both = workflow_outcome(WF, [a, b], {a.id: _row(a, State.COMPLETED, b"1"), b.id: _row(b, State.COMPLETED, b"2")})
    assert both.state == State.COMPLETED and both.result is None
    failed = workflow_outcome(WF, [a, b], {a.id: _row(a, State.COMPLETED), b.id: _row(b, State.DEAD_LETTERED,
                                                                                      reason="NACK_DEAD_LETTER")})
    assert failed.state == State.DEAD_LETTERED
    assert failed.reason == f"WORKFLOW_FAILED: node {'02' * 4}-{'02' * 2}-{'02' * 2}-{'02' * 2}-{'02' * 6} (t2) " \
                            "was dead-lettered: NACK_DEAD_LETTER"


def test_children_come_before_their_parents_whatever_the_node_order() -> None:
    nodes = [_node(3, 2), _node(1), _node(2, 1)]  # node 0 runs after node 2, node 2 after node 1
    order = children_first([(n.id, n.depends_on) for n in nodes])
    assert order.index(0) < order.index(2) < order.index(1) and sorted(order) == [0, 1, 2]
    assert children_first([]) == []


def test_counts_add_up_repeated_states_and_say_when_terminal() -> None:
    c = counts_of([(int(State.COMPLETED), 1), (int(State.COMPLETED), 2), (int(State.CANCELLED), 1), (99, 5)])
    assert (c.completed, c.cancelled, c.total, counts_terminal(c)) == (3, 1, 4, True)
    assert not counts_terminal(counts_of([(int(State.DEFERRED), 1)]))
