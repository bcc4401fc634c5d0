"""Conformance: the admin side of workflows (docs/workflows.md "Seeing and steering a
workflow"), on every backend.

``Store.list_workflows`` pages the workflows highest id first with their jobs per state,
``workflow_nodes`` reads one workflow's jobs with their edges and failures, and
``cancel_workflow`` cancels every unfinished node in one commit, each naming the cancel's
reason.
"""

from __future__ import annotations

import os

from sepp.domain.ids import job_id_text
from sepp.domain.params import SettleKind
from sepp.domain.records import JobRow
from sepp.domain.states import State
from sepp.storage.base import Store
from sepp.storage.workflows import WorkflowClaim
from storage.conformance_kit import NOW, POLICY, S, get, lease, put, row, settle1

REASON = "WORKFLOW_CANCELLED: test"


def _wf_id(n: int) -> bytes:
    """A workflow id that sorts as ``n`` does (the listing's order)."""
    return bytes([n]) + os.urandom(15)


async def _store(store: Store, wf: bytes, rows: list[JobRow], edges: dict[int, list[int]],
                 on_failure: dict[int, int] | None = None) -> None:
    """Store ``rows`` as workflow ``wf`` with ``edges`` (row index → its parents' indexes, given
    in topological order)."""
    deps = {i: [rows[j].id for j in parents] for i, parents in edges.items()}
    assert await store.enqueue_workflow(rows, [0] * len(rows), NOW, (), (), deps, on_failure or {},
                                        WorkflowClaim(wf, "", 0)) is None


async def _run(store: Store, queue: str, kind: SettleKind, now: int, reason: str = "") -> bytes:
    (rec,) = await lease(store, queue, n=1, now=now)
    await settle1(store, rec, kind, now, reason=reason)
    return rec.id


async def test_no_workflow_lists_nothing_and_a_plain_job_is_no_workflow(store: Store) -> None:
    await put(store, row("plain"))
    assert await store.list_workflows(None, 50) == []
    assert await store.workflow_nodes(os.urandom(16)) == []


async def test_the_listing_is_highest_id_first_with_counts_and_pages_at_the_limit(store: Store) -> None:
    ids = [_wf_id(n) for n in (10, 20, 30)]
    for k, wf in enumerate(ids):  # 1, 2 and 3 nodes, a chain each
        rows = [row("wl") for _ in range(k + 1)]
        await _store(store, wf, rows, {i: [i - 1] for i in range(1, k + 1)})
    await put(store, row("wl"))  # not in a workflow
    listed = await store.list_workflows(None, 50)
    assert [w.workflow_id for w in listed] == ids[::-1]
    top = listed[0]
    assert (top.nodes, top.counts.ready, top.counts.deferred, top.created_at, top.terminal) == (3, 1, 2, NOW, False)
    assert [w.nodes for w in listed] == [3, 2, 1]
    # the limit exactly, one below it, and a page after the last id
    assert [w.workflow_id for w in await store.list_workflows(None, 3)] == ids[::-1]
    assert [w.workflow_id for w in await store.list_workflows(None, 2)] == [ids[2], ids[1]]
    assert [w.workflow_id for w in await store.list_workflows(ids[1], 2)] == [ids[0]]
    assert await store.list_workflows(ids[0], 2) == []
    assert [w.workflow_id for w in await store.list_workflows(None, 1)] == [ids[2]]


async def test_a_workflow_of_finished_nodes_is_terminal(store: Store) -> None:
    wf = _wf_id(1)
    rows = [row("wt", max_attempts=1), row("wt")]
    await _store(store, wf, rows, {})
    await _run(store, "wt", SettleKind.ACK, NOW + S)
    (summary,) = await store.list_workflows(None, 5)
    assert not summary.terminal and summary.counts.completed == 1
    await _run(store, "wt", SettleKind.DEAD_LETTER, NOW + 2 * S, reason="boom")
    (summary,) = await store.list_workflows(None, 5)
    assert summary.terminal and (summary.counts.completed, summary.counts.dead_lettered) == (1, 1)


async def test_the_nodes_in_node_order_with_edges_and_why_one_failed(store: Store) -> None:
    wf = _wf_id(2)
    a, b, c = row("wn", job_type="extract"), row("wn", job_type="load"), row("wn2", job_type="report")
    await _store(store, wf, [a, b, c], {1: [0], 2: [1]})
    (rec,) = await lease(store, "wn", n=1, now=NOW + S)
    await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + S, reason="NACK_DEAD_LETTER", error_message="disk full")
    nodes = await store.workflow_nodes(wf)
    assert [n.id for n in nodes] == [a.id, b.id, c.id]
    assert [n.depends_on for n in nodes] == [(), (a.id,), (b.id,)]
    assert [(n.queue, n.job_type) for n in nodes] == [("wn", "extract"), ("wn", "load"), ("wn2", "report")]
    assert [n.state for n in nodes] == [State.DEAD_LETTERED, State.CANCELLED, State.CANCELLED]
    assert nodes[0].failed and nodes[0].last_error == "disk full" and nodes[0].finished_at == NOW + S
    assert nodes[1].reason == f"DEPENDENCY_FAILED: dependency {job_id_text(a.id)} was dead-lettered"
    assert nodes[2].reason == f"DEPENDENCY_FAILED: dependency {job_id_text(b.id)} was cancelled"
    assert nodes[1].last_error == ""  # read for a DEAD_LETTERED job only


async def test_cancel_cancels_every_unfinished_node_naming_the_reason(store: Store) -> None:
    wf = _wf_id(3)
    done, running, waiting, last = row("wc"), row("wc"), row("wc"), row("wc")
    # edges point either way in the node order: waiting after running, last after waiting
    await _store(store, wf, [last, done, running, waiting], {3: [2], 0: [3]})
    await _run(store, "wc", SettleKind.ACK, NOW + S)  # the first READY one (last is DEFERRED)
    (rec,) = await lease(store, "wc", n=1, now=NOW + 2 * S)
    assert rec.id == running.id
    outside = row("out")
    await store.enqueue([outside], [0], NOW, depends_on={0: [last.id]})
    result = await store.cancel_workflow(wf, NOW + 3 * S, POLICY, REASON)
    assert result.found
    assert sorted(result.cancelled) == sorted([waiting.id, last.id])
    assert list(result.requested) == [running.id] and list(result.queues) == ["wc"]
    for job in (waiting, last):
        rec2 = await get(store, job.id)
        assert (rec2.state, rec2.reason, rec2.finished_at) == (State.CANCELLED, REASON, NOW + 3 * S)
    assert (await get(store, done.id)).state == State.COMPLETED
    got = await get(store, running.id)
    assert got.state == State.RESERVED and got.cancel_requested
    out = await get(store, outside.id)  # a job outside the workflow follows its failure policy
    assert out.state == State.CANCELLED and out.reason == (
        f"DEPENDENCY_FAILED: dependency {job_id_text(last.id)} was cancelled")
    (summary,) = await store.list_workflows(None, 5)
    assert (summary.counts.cancelled, summary.counts.reserved, summary.counts.completed) == (2, 1, 1)


async def test_a_second_cancel_changes_nothing_finished_and_an_unknown_id_is_not_found(store: Store) -> None:
    wf = _wf_id(4)
    rows = [row("wd"), row("wd")]
    await _store(store, wf, rows, {1: [0]})
    first = await store.cancel_workflow(wf, NOW + S, POLICY, REASON)
    assert first.found and len(first.cancelled) == 2
    again = await store.cancel_workflow(wf, NOW + 2 * S, POLICY, "other")
    assert again.found and list(again.cancelled) == [] and list(again.requested) == []
    assert [(await get(store, r.id)).reason for r in rows] == [REASON, REASON]
    missing = await store.cancel_workflow(os.urandom(16), NOW, POLICY, REASON)
    assert not missing.found and list(missing.cancelled) == []
