"""Conformance: an ack that carries children (docs/workflows.md "A running job extends its
workflow"), on every backend.

The children are stored in the ack's own commit, in the acked job's workflow; the job's
dependents wait for them (or for the callback) instead of the job; a refused ack, or one whose
children are refused, stores none.
"""

from __future__ import annotations

import os

from sepp.domain.params import Children, SettleKind, SettleParams, SettleResult
from sepp.domain.records import JobRecord, JobRow
from sepp.domain.states import State
from sepp.storage.base import Store
from sepp.storage.dependencies import RUN
from storage.conformance_kit import NOW, POLICY, S, get, lease, put, row, settle1


def _children(rows: list[JobRow], then: JobRow | None = None, own: dict[int, list[bytes]] | None = None,
              on_failure: dict[int, int] | None = None) -> Children:
    """``rows`` as the children of an ack (``own``: row index → its own stored dependencies),
    ``then`` their callback (after every child)."""
    depends_on: dict[int, list[bytes]] = dict(own or {})
    every = [*rows, then] if then is not None else list(rows)
    targets = list(range(len(rows)))
    if then is not None:
        depends_on[len(rows)] = [r.id for r in rows]
        targets = [len(rows)]
    return Children(every, (), (), dict(sorted(depends_on.items())), on_failure or {}, targets, os.urandom(16))


async def _ack(store: Store, rec: JobRecord, now: int, kids: Children | None) -> SettleResult:
    assert rec.lease_id is not None
    item = SettleParams(rec.id, rec.lease_id, SettleKind.ACK, now, outcome="completed", children=kids)
    (result,) = await store.settle([item], POLICY)
    return result


async def _parent_with_dependent(store: Store, policy: int | None = None) -> tuple[JobRecord, JobRow]:
    """A job of queue "p", leased, and a job of queue "d" that depends on it (DEFERRED)."""
    parent, dependent = row("p"), row("d")
    await put(store, parent)
    await store.enqueue([dependent], [0], NOW, depends_on={0: [parent.id]},
                        on_failure={0: policy} if policy is not None else None)
    (rec,) = await lease(store, "p", now=NOW + S)
    return rec, dependent


async def _run(store: Store, queue: str, now: int, kind: SettleKind = SettleKind.ACK) -> JobRecord:
    """Lease one job of ``queue`` and settle it with ``kind``; its record as leased."""
    (rec,) = await lease(store, queue, now=now)
    await settle1(store, rec, kind, now, reason="boom" if kind is SettleKind.DEAD_LETTER else "")
    return rec


async def test_children_are_stored_with_the_ack_in_a_new_workflow(store: Store) -> None:
    await put(store, row("p"))
    (rec,) = await lease(store, "p", now=NOW + S)
    kids = [row("c"), row("c")]
    plan = _children(kids)
    result = await _ack(store, rec, NOW + 2 * S, plan)
    assert result.state == State.COMPLETED
    assert [(await get(store, k.id)).state for k in kids] == [State.READY, State.READY]
    assert await store.workflow_jobs(plan.workflow_id) == [rec.id, kids[0].id, kids[1].id]
    assert len(await lease(store, "c", n=10, now=NOW + 3 * S)) == 2


async def test_the_dependent_waits_for_every_child_and_is_released_once(store: Store) -> None:
    rec, dependent = await _parent_with_dependent(store)
    kids = [row("c"), row("c")]
    assert (await _ack(store, rec, NOW + 2 * S, _children(kids))).state == State.COMPLETED
    assert (await get(store, dependent.id)).state == State.DEFERRED
    await _run(store, "c", NOW + 3 * S)
    assert (await get(store, dependent.id)).state == State.DEFERRED
    await _run(store, "c", NOW + 4 * S)
    assert (await get(store, dependent.id)).state == State.READY
    assert [r.id for r in await lease(store, "d", n=10, now=NOW + 5 * S)] == [dependent.id]
    assert await lease(store, "d", n=10, now=NOW + 6 * S) == []


async def test_the_callback_runs_after_every_child_and_the_dependent_after_it(store: Store) -> None:
    rec, dependent = await _parent_with_dependent(store)
    kids, then = [row("c"), row("c"), row("c")], row("cb")
    await _ack(store, rec, NOW + 2 * S, _children(kids, then))
    assert (await get(store, then.id)).state == State.DEFERRED
    for k in range(3):
        assert (await get(store, then.id)).state == State.DEFERRED
        await _run(store, "c", NOW + (3 + k) * S)
    assert (await get(store, then.id)).state == State.READY
    assert (await get(store, dependent.id)).state == State.DEFERRED
    await _run(store, "cb", NOW + 10 * S)
    assert (await get(store, dependent.id)).state == State.READY


async def test_children_join_the_workflow_of_a_job_that_has_one(store: Store) -> None:
    from sepp.storage.workflows import WorkflowClaim

    first, second = row("p"), row("d")
    claim = WorkflowClaim(os.urandom(16), "", 0)
    await store.enqueue_workflow([first, second], [0, 0], NOW, (), (), {1: [first.id]}, {}, claim)
    (rec,) = await lease(store, "p", now=NOW + S)
    kid = row("c")
    plan = _children([kid])
    await _ack(store, rec, NOW + 2 * S, plan)
    assert await store.workflow_jobs(claim.workflow_id) == [first.id, second.id, kid.id]
    assert await store.workflow_jobs(plan.workflow_id) == []  # the job kept its own
    assert (await get(store, second.id)).state == State.DEFERRED
    await _run(store, "c", NOW + 3 * S)
    assert (await get(store, second.id)).state == State.READY


async def test_a_child_may_depend_on_a_stored_job(store: Store) -> None:
    rec, dependent = await _parent_with_dependent(store)
    other = row("o")
    await put(store, other)
    kid = row("c")
    await _ack(store, rec, NOW + 2 * S, _children([kid], own={0: [other.id]}))
    assert (await get(store, kid.id)).state == State.DEFERRED
    await _run(store, "o", NOW + 3 * S)
    assert (await get(store, kid.id)).state == State.READY
    await _run(store, "c", NOW + 4 * S)
    assert (await get(store, dependent.id)).state == State.READY


async def test_children_naming_no_stored_job_fail_the_attempt_and_store_nothing(store: Store) -> None:
    rec, dependent = await _parent_with_dependent(store)
    kids = [row("c"), row("c")]
    ghost = os.urandom(16)
    result = await _ack(store, rec, NOW + 2 * S, _children(kids, own={1: [ghost]}))
    assert result.error is None and result.state in (State.READY, State.SCHEDULED)
    assert [await store.get_job(k.id) for k in kids] == [None, None]
    parent = await get(store, rec.id)
    (entry,) = parent.attempt_entries()[:1]
    assert entry["outcome"] == "retry"
    assert entry["error_message"].startswith("DependencyNotFound: child 1 depends on job ")
    assert (await get(store, dependent.id)).state == State.DEFERRED  # still waiting for the job
    (again,) = await lease(store, "p", now=NOW + 3600 * S)
    assert (await _ack(store, again, NOW + 3601 * S, None)).state == State.COMPLETED
    assert (await get(store, dependent.id)).state == State.READY


async def test_a_refused_ack_stores_no_children(store: Store) -> None:
    rec, dependent = await _parent_with_dependent(store)
    kid = row("c")
    stale = rec._replace(lease_id=os.urandom(16))
    assert (await _ack(store, stale, NOW + 2 * S, _children([kid]))).error is not None
    expired = await _ack(store, rec, NOW + 3600 * S, _children([kid]))  # past the lease
    assert expired.error is not None
    assert await store.get_job(kid.id) is None
    assert (await get(store, dependent.id)).state == State.DEFERRED


async def test_a_repeated_ack_stores_its_children_once(store: Store) -> None:
    rec, _dependent = await _parent_with_dependent(store)
    kid = row("c")
    plan = _children([kid])
    await _ack(store, rec, NOW + 2 * S, plan)
    again = await _ack(store, rec, NOW + 3 * S, _children([row("c")]))
    assert again.error is None and again.state == State.COMPLETED
    assert await store.workflow_jobs(plan.workflow_id) == [rec.id, kid.id]
    assert len(await lease(store, "c", n=10, now=NOW + 4 * S)) == 1


async def test_a_failed_child_applies_the_dependents_policy(store: Store) -> None:
    rec, cancels = await _parent_with_dependent(store)
    runs = row("d")
    await store.enqueue([runs], [0], NOW, depends_on={0: [rec.id]}, on_failure={0: RUN})
    kids = [row("c"), row("c")]
    await _ack(store, rec, NOW + 2 * S, _children(kids))
    await _run(store, "c", NOW + 3 * S, SettleKind.DEAD_LETTER)
    gone = await get(store, cancels.id)
    assert gone.state == State.CANCELLED and gone.reason is not None
    assert gone.reason.startswith("DEPENDENCY_FAILED: dependency ")
    assert (await get(store, runs.id)).state == State.DEFERRED  # the other child still runs
    await _run(store, "c", NOW + 4 * S)
    assert (await get(store, runs.id)).state == State.READY


async def test_acks_with_and_without_children_in_one_settle(store: Store) -> None:
    await put(store, *[row("p") for _ in range(4)])
    recs = await lease(store, "p", n=4, now=NOW + S)
    kids = {0: [row("c")], 2: [row("c"), row("c")]}
    items = []
    for i, rec in enumerate(recs):
        assert rec.lease_id is not None
        plan = _children(kids[i]) if i in kids else None
        items.append(SettleParams(rec.id, rec.lease_id, SettleKind.ACK, NOW + 2 * S, outcome="completed",
                                  children=plan))
    results = await store.settle(items, POLICY)
    assert [r.state for r in results] == [State.COMPLETED] * 4
    assert len(await lease(store, "c", n=10, now=NOW + 3 * S)) == 3


async def test_a_thousand_children_with_a_callback(store: Store) -> None:
    rec, dependent = await _parent_with_dependent(store)
    kids, then = [row("c") for _ in range(999)], row("cb")
    assert (await _ack(store, rec, NOW + 2 * S, _children(kids, then))).state == State.COMPLETED
    assert len(await lease(store, "c", n=1000, now=NOW + 3 * S)) == 999
    assert (await get(store, then.id)).state == State.DEFERRED
    assert (await get(store, dependent.id)).state == State.DEFERRED


async def test_children_acked_together_release_the_dependent_once(store: Store) -> None:
    rec, dependent = await _parent_with_dependent(store)
    kids = [row("c") for _ in range(3)]
    await _ack(store, rec, NOW + 2 * S, _children(kids))
    leased = await lease(store, "c", n=3, now=NOW + 3 * S)
    items = [SettleParams(k.id, k.lease_id or b"", SettleKind.ACK, NOW + 4 * S, outcome="completed") for k in leased]
    assert [r.state for r in await store.settle(items, POLICY)] == [State.COMPLETED] * 3
    assert (await get(store, dependent.id)).state == State.READY
    assert [r.id for r in await lease(store, "d", n=10, now=NOW + 5 * S)] == [dependent.id]
