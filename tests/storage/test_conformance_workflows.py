"""Conformance: workflows (docs/workflows.md "Workflows"), on every backend.

``Store.enqueue_workflow`` stores a graph of jobs — edges between rows of the one call as well
as to stored jobs — in one commit or nothing, stamps each job with the workflow's id and
honours the workflow's idempotency key.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.records import JobRecord, JobRow
from sepp.domain.states import State
from sepp.storage.base import Store
from sepp.storage.dependencies import RUN
from sepp.storage.errors import DependencyMissing
from sepp.storage.workflows import WorkflowClaim, WorkflowDedup
from storage.conformance_kit import NOW, POLICY, S, get, lease, row, settle1


def _claim(key: str = "", until: int = NOW + 3600 * S) -> WorkflowClaim:
    return WorkflowClaim(os.urandom(16), key, until)


async def _store(store: Store, rows: list[JobRow], edges: dict[int, list[int]], claim: WorkflowClaim | None = None,
                 on_failure: dict[int, int] | None = None) -> WorkflowDedup | None:
    """Store ``rows`` as one workflow with ``edges`` (row index → indexes of its parents)."""
    deps = {i: [rows[j].id for j in parents] for i, parents in edges.items()}
    return await store.enqueue_workflow(rows, [0] * len(rows), NOW, (), (), deps, on_failure or {},
                                        claim or _claim())


async def _run_one(store: Store, queue: str, now: int, *, alone: bool = True) -> bytes:
    """Lease one job of ``queue`` (with ``alone``: the only one there is) and ack it; its id."""
    recs = await lease(store, queue, n=10 if alone else 1, now=now)
    assert len(recs) == 1, [r.id for r in recs]
    result = await settle1(store, recs[0], SettleKind.ACK, now)
    assert result.state == State.COMPLETED
    return recs[0].id


async def test_a_chain_runs_in_order_and_each_job_carries_the_workflow_id(store: Store) -> None:
    rows = [row("wf") for _ in range(3)]
    claim = _claim()
    assert await _store(store, rows, {1: [0], 2: [1]}, claim) is None
    assert [(await get(store, r.id)).state for r in rows] == [State.READY, State.DEFERRED, State.DEFERRED]
    assert await store.workflow_jobs(claim.workflow_id) == [r.id for r in rows]
    order = [await _run_one(store, "wf", NOW + k * S) for k in range(1, 4)]
    assert order == [r.id for r in rows]
    assert await lease(store, "wf", n=10, now=NOW + 10 * S) == []


async def test_edges_in_any_index_order(store: Store) -> None:
    rows = [row("wf") for _ in range(3)]  # row 0 after row 2, row 2 after row 1
    deps = {1: [], 2: [rows[1].id], 0: [rows[2].id]}  # given in topological order
    assert await store.enqueue_workflow(rows, [0] * 3, NOW, (), (), {k: v for k, v in deps.items() if v}, {},
                                        _claim()) is None
    order = [await _run_one(store, "wf", NOW + k * S) for k in range(1, 4)]
    assert order == [rows[1].id, rows[2].id, rows[0].id]


async def test_a_chord_callback_is_released_once_after_all_children(store: Store) -> None:
    children = [row("kids") for _ in range(5)]
    callback = row("cb")
    assert await _store(store, [*children, callback], {5: [0, 1, 2, 3, 4]}) is None
    for k in range(5):
        await _run_one(store, "kids", NOW + (k + 1) * S, alone=False)
        expected = State.READY if k == 4 else State.DEFERRED
        assert (await get(store, callback.id)).state == expected
    assert await _run_one(store, "cb", NOW + 10 * S) == callback.id
    assert await lease(store, "cb", n=10, now=NOW + 11 * S) == []


async def test_nodes_on_different_queues_and_a_stored_dependency(store: Store) -> None:
    (outside,) = [row("before")]
    await store.enqueue([outside], [0], NOW)
    a, b = row("one"), row("two")
    deps = {1: [a.id, outside.id]}
    assert await store.enqueue_workflow([a, b], [0, 0], NOW, (), (), deps, {}, _claim()) is None
    await _run_one(store, "one", NOW + S)
    assert (await get(store, b.id)).state == State.DEFERRED
    await _run_one(store, "before", NOW + 2 * S)
    assert (await get(store, b.id)).state == State.READY


async def test_nodes_ready_or_cancelled_at_enqueue_carry_the_workflow_id(store: Store) -> None:
    # A node with dependencies is stamped with its deferral, whatever the deferral decides:
    # READY (its one dependency COMPLETED already), CANCELLED (one failed), DEFERRED.
    done, dead = row("before"), row("gone", max_attempts=1)
    await store.enqueue([done, dead], [0, 0], NOW)
    await _run_one(store, "before", NOW + S)
    (rec,) = await lease(store, "gone", now=NOW + S)
    await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + S, reason="boom")
    rows = [row("wf") for _ in range(4)]
    claim = _claim()
    deps = {0: [done.id], 1: [dead.id], 2: [rows[3].id]}
    assert await store.enqueue_workflow(rows, [0] * 4, NOW + 2 * S, (), (), deps, {}, claim) is None
    assert [(await get(store, r.id)).state for r in rows] == [State.READY, State.CANCELLED, State.DEFERRED,
                                                              State.READY]
    assert await store.workflow_jobs(claim.workflow_id) == [r.id for r in rows]
    assert await store.workflow_jobs(_claim().workflow_id) == []


async def test_an_unknown_stored_dependency_stores_nothing(store: Store) -> None:
    rows = [row("wf"), row("wf")]
    ghost = os.urandom(16)
    claim = _claim("k-missing")
    with pytest.raises(DependencyMissing) as info:
        await store.enqueue_workflow(rows, [0, 0], NOW, (), (), {1: [rows[0].id, ghost]}, {}, claim)
    assert info.value.missing == {1: ghost}
    assert await store.get_job(rows[0].id) is None
    assert await store.workflow_jobs(claim.workflow_id) == []
    again = _claim("k-missing")  # the key was not claimed either
    assert await _store(store, [row("wf")], {}, again) is None


async def test_a_retried_key_answers_the_first_workflow_and_stores_nothing(store: Store) -> None:
    first = [row("wf") for _ in range(3)]
    claim = _claim("order-42")
    assert await _store(store, first, {2: [0, 1]}, claim) is None
    retry = [row("wf") for _ in range(3)]
    dedup = await _store(store, retry, {2: [0, 1]}, _claim("order-42"))
    assert dedup == WorkflowDedup(claim.workflow_id, [r.id for r in first])
    assert [await store.get_job(r.id) for r in retry] == [None, None, None]
    assert len(await lease(store, "wf", n=10, now=NOW + S)) == 2


async def test_an_expired_key_is_claimed_again(store: Store) -> None:
    assert await _store(store, [row("wf")], {}, _claim("short", until=NOW + S)) is None
    later = [row("wf")]
    claim = WorkflowClaim(os.urandom(16), "short", NOW + 3600 * S)
    deps: dict[int, list[bytes]] = {}
    assert await store.enqueue_workflow(later, [0], NOW + 2 * S, (), (), deps, {}, claim) is None
    assert await store.workflow_jobs(claim.workflow_id) == [later[0].id]


async def test_expired_workflow_keys_are_swept_oldest_first_up_to_the_limit(store: Store) -> None:
    for i in range(3):
        assert await _store(store, [row("wf")], {}, _claim(f"exp-{i}", until=NOW + (i + 1) * S)) is None
    assert await _store(store, [row("wf")], {}, _claim("kept", until=NOW + 3600 * S)) is None
    assert (await store.prune(NOW + S - 1, 100)).count == 0        # one µs before the first expiry
    assert (await store.prune(NOW + 3 * S, 2)).count == 2         # at the limit: the two oldest
    assert (await store.prune(NOW + 3 * S, 2)).count == 1         # the third
    assert (await store.prune(NOW + 3 * S, 2)).count == 0         # "kept" has not expired
    # Swept keys are free; the unexpired one still answers its workflow.
    assert await _store(store, [row("wf")], {}, _claim("exp-0")) is None
    assert await _store(store, [row("wf")], {}, _claim("kept")) is not None


async def test_a_failed_parent_cancels_down_the_workflow_and_run_is_released(store: Store) -> None:
    rows = [row("wf", max_attempts=1), row("mid"), row("leaf"), row("runner")]
    assert await _store(store, rows, {1: [0], 2: [1], 3: [0]}, on_failure={3: RUN}) is None
    (rec,) = await lease(store, "wf", now=NOW + S)
    await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + S, reason="boom")
    assert (await get(store, rows[0].id)).state == State.DEAD_LETTERED
    assert (await get(store, rows[1].id)).state == State.CANCELLED
    assert (await get(store, rows[2].id)).state == State.CANCELLED
    assert (await get(store, rows[3].id)).state == State.READY


async def test_a_node_cancelled_at_enqueue_cancels_its_dependents_of_the_call(store: Store) -> None:
    dead = row("gone", max_attempts=1)
    await store.enqueue([dead], [0], NOW)
    (rec,) = await lease(store, "gone", now=NOW)
    await settle1(store, rec, SettleKind.DEAD_LETTER, NOW, reason="boom")
    a, b = row("wf"), row("wf")
    assert await store.enqueue_workflow([a, b], [0, 0], NOW + S, (), (), {0: [dead.id], 1: [a.id]}, {},
                                        _claim()) is None
    assert (await get(store, a.id)).state == State.CANCELLED
    assert (await get(store, b.id)).state == State.CANCELLED


async def test_a_ten_thousand_node_fan_in_in_one_call(store: Store) -> None:
    children = [row("fan") for _ in range(10_000)]
    callback = row("fan-cb")
    claim = _claim()
    assert await _store(store, [*children, callback], {10_000: list(range(10_000))}, claim) is None
    assert len(await store.workflow_jobs(claim.workflow_id)) == 10_001
    assert (await get(store, callback.id)).state == State.DEFERRED
    leased: list[JobRecord] = []
    while len(leased) < 10_000:
        recs = await lease(store, "fan", n=1000, now=NOW + S)
        assert recs
        leased.extend(recs)
    last = leased.pop()
    for k in range(0, len(leased), 1000):  # every child but one acked, a thousand a call
        acks = [SettleParams(r.id, r.lease_id, SettleKind.ACK, NOW + 2 * S, -1, "", "", "", "")
                for r in leased[k:k + 1000] if r.lease_id is not None]
        assert all(res.state == State.COMPLETED for res in await store.settle(acks, POLICY))
    assert (await get(store, callback.id)).state == State.DEFERRED
    await settle1(store, last, SettleKind.ACK, NOW + 3 * S)
    assert (await get(store, callback.id)).state == State.READY
    assert [r.id for r in await lease(store, "fan-cb", n=5, now=NOW + 4 * S)] == [callback.id]


async def test_two_concurrent_calls_with_one_key_store_one_workflow(store: Store) -> None:
    calls = [([row("race") for _ in range(3)], _claim("same-key")) for _ in range(2)]
    answers = await asyncio.gather(*(_store(store, rows, {1: [0], 2: [1]}, claim) for rows, claim in calls))
    stored = [i for i, a in enumerate(answers) if a is None]
    assert len(stored) == 1
    (winner,) = stored
    (dedup,) = [a for a in answers if a is not None]
    rows, claim = calls[winner]
    assert dedup == WorkflowDedup(claim.workflow_id, [r.id for r in rows])
    assert len(await lease(store, "race", n=10, now=NOW + S)) == 1
