"""Conformance: dependencies between jobs (docs/workflows.md), on every backend.

A job enqueued with dependencies that are not all COMPLETED is DEFERRED; it becomes READY
(or SCHEDULED for a later run_at) in the commit of the ack that completes its last one, and
exactly once. Retries, nacks and lease expiries of a dependency release nothing; an id of no
stored job refuses the whole enqueue (``DependencyMissing``).
"""

from __future__ import annotations

import asyncio

import pytest

from sepp.domain.listing import JobQuery
from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.storage.admin import StateCounts
from sepp.storage.base import Store
from sepp.storage.dependencies import CANCEL, WAIT
from sepp.storage.errors import DependencyMissing
from storage.conformance_kit import LEASE, NOW, POLICY, S, get, lease, put, row, settle1


async def _running(store: Store, n: int, queue: str = "dep") -> list[bytes]:
    """``n`` jobs of ``queue`` enqueued and leased (RESERVED); their ids."""
    rows = [row(queue) for _ in range(n)]
    await put(store, *rows)
    recs = await lease(store, queue, n=n)
    assert len(recs) == n
    return [r.id for r in recs]


async def _child(store: Store, deps: list[bytes], *, run_at: int = NOW, queue: str = "child",
                 on_failure: int = CANCEL) -> bytes:
    """A job of ``queue`` depending on ``deps`` with the failure policy ``on_failure``; its id."""
    state = State.SCHEDULED if run_at > NOW else State.READY
    child = row(queue, run_at=run_at, state=state)
    assert await store.enqueue([child], [0], NOW, depends_on={0: deps}, on_failure={0: on_failure}) == {}
    return child.id


async def _ack(store: Store, job_id: bytes, now: int = NOW + S) -> None:
    rec = await get(store, job_id)
    result = await settle1(store, rec, SettleKind.ACK, now)
    assert result.error is None and result.state == State.COMPLETED


async def test_a_job_waits_deferred_and_is_released_by_its_last_dependency(store: Store) -> None:
    a, b = await _running(store, 2)
    child = await _child(store, [a, b])
    assert (await get(store, child)).state == State.DEFERRED
    assert await lease(store, "child") == []
    await _ack(store, a)
    assert (await get(store, child)).state == State.DEFERRED
    await _ack(store, b)
    assert (await get(store, child)).state == State.READY
    (leased,) = await lease(store, "child", n=5, now=NOW + 2 * S)
    assert leased.id == child


async def test_released_exactly_once_even_when_its_dependencies_are_acked_again(store: Store) -> None:
    (a,) = await _running(store, 1)
    child = await _child(store, [a])
    rec = await get(store, a)
    await _ack(store, a)
    (leased,) = await lease(store, "child", now=NOW + 2 * S)
    assert leased.id == child
    again = await settle1(store, rec, SettleKind.ACK, NOW + 3 * S)  # a repeated ack: succeeds, writes nothing
    assert again.state == State.COMPLETED
    assert (await get(store, child)).state == State.RESERVED


async def test_a_completed_dependency_is_satisfied_at_enqueue(store: Store) -> None:
    a, b = await _running(store, 2)
    await _ack(store, a)
    child = await _child(store, [a])
    assert (await get(store, child)).state == State.READY
    other = await _child(store, [a, b])
    assert (await get(store, other)).state == State.DEFERRED
    await _ack(store, b)
    assert (await get(store, other)).state == State.READY


async def test_a_future_run_at_is_scheduled_on_release(store: Store) -> None:
    (a,) = await _running(store, 1)
    child = await _child(store, [a], run_at=NOW + 3600 * S)
    assert (await get(store, child)).state == State.DEFERRED
    await _ack(store, a)
    rec = await get(store, child)
    assert (rec.state, rec.run_at) == (State.SCHEDULED, NOW + 3600 * S)


async def test_retries_nacks_and_lease_expiry_of_a_dependency_release_nothing(store: Store) -> None:
    a, b, c = await _running(store, 3)
    child = await _child(store, [a, b, c], on_failure=WAIT)  # c's dead letter leaves it waiting
    await settle1(store, await get(store, a), SettleKind.RETRY, NOW + S, delay=0)
    await settle1(store, await get(store, b), SettleKind.RELEASE, NOW + S)
    await settle1(store, await get(store, c), SettleKind.DEAD_LETTER, NOW + S, reason="boom")
    assert (await get(store, child)).state == State.DEFERRED
    # a lease that runs out (attempts left: back to READY) releases nothing either
    recs = await lease(store, "dep", n=2, now=NOW + 2 * S)
    assert {r.id for r in recs} == {a, b}
    await store.reclaim_expired(NOW + 2 * S + LEASE + S, 100, POLICY)
    assert (await get(store, a)).state == State.READY
    assert (await get(store, child)).state == State.DEFERRED


async def test_an_unknown_dependency_refuses_the_whole_call_naming_it(store: Store) -> None:
    (a,) = await _running(store, 1)
    ghost = bytes(16)
    first, second = row("child"), row("child")
    with pytest.raises(DependencyMissing) as err:
        await store.enqueue([first, second], [0, 0], NOW, depends_on={1: [a, ghost]})
    assert err.value.missing == {1: ghost}
    assert await store.get_job(first.id) is None and await store.get_job(second.id) is None
    # the dependency named in the refused call still releases nothing it was not asked to
    await _ack(store, a)


async def test_a_dependency_shared_by_many_jobs_releases_each_once(store: Store) -> None:
    (a,) = await _running(store, 1)
    children = [await _child(store, [a]) for _ in range(20)]
    await _ack(store, a)
    leased = await lease(store, "child", n=100, now=NOW + 2 * S)
    assert sorted(r.id for r in leased) == sorted(children)


async def test_the_last_two_dependencies_acked_at_once_release_the_job_once(store: Store) -> None:
    a, b = await _running(store, 2)
    child = await _child(store, [a, b])
    ra, rb = await get(store, a), await get(store, b)
    await asyncio.gather(settle1(store, ra, SettleKind.ACK, NOW + S), settle1(store, rb, SettleKind.ACK, NOW + S))
    assert (await get(store, child)).state == State.READY
    assert [r.id for r in await lease(store, "child", n=5, now=NOW + 2 * S)] == [child]


async def test_acks_of_a_batch_release_a_job_depending_on_several_of_them(store: Store) -> None:
    ids = await _running(store, 4)
    child = await _child(store, ids[:3])
    recs = [await get(store, i) for i in ids]
    results = await store.settle([SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + S) for r in recs], POLICY)
    assert all(r.state == State.COMPLETED for r in results)
    assert (await get(store, child)).state == State.READY


async def test_a_released_job_completes_its_own_dependents_in_turn(store: Store) -> None:
    (a,) = await _running(store, 1)
    b = await _child(store, [a], queue="dep")
    c = await _child(store, [b])
    await _ack(store, a)
    (leased,) = await lease(store, "dep", now=NOW + 2 * S)
    assert leased.id == b
    await _ack(store, b, NOW + 3 * S)
    assert (await get(store, c)).state == State.READY


async def test_deferred_jobs_are_counted_per_queue_and_in_every_queue(store: Store) -> None:
    (a,) = await _running(store, 1)
    await _child(store, [a])
    await _child(store, [a])
    assert (await store.admin.state_counts("child"))["child"] == StateCounts(deferred=2)
    every = await store.admin.state_counts(None)
    assert every["child"] == StateCounts(deferred=2) and every["child"].total == 2
    assert every["dep"] == StateCounts(reserved=1)
    assert (await store.admin.queue_gauges()).counts["child"].deferred == 2
    await _ack(store, a)
    assert (await store.admin.state_counts("child"))["child"] == StateCounts(ready=2)


async def test_deferred_jobs_are_listed_in_enqueue_order_with_what_they_wait_for(store: Store) -> None:
    a, b = await _running(store, 2)
    first = await _child(store, [a, b])
    second = await _child(store, [b])
    await store.enqueue([row("other")], [0], NOW)
    deferred = JobQuery(queue="child", state=State.DEFERRED)
    page = await store.admin.list_jobs(deferred, None, 1)
    assert [s.record.id for s in page.jobs] == [first] and page.next_key is not None
    rest = await store.admin.list_jobs(deferred, page.next_key, 5)
    assert [s.record.id for s in rest.jobs] == [second] and rest.next_key is None
    every = await store.admin.list_jobs(JobQuery(state=State.DEFERRED), None, 5)
    assert [s.record.id for s in every.jobs] == [first, second]
    assert await store.admin.oldest_deferred(["child", "dep", "none"]) == {"child": NOW}
    assert await store.admin.waiting_on((await get(store, first)).seq) == [a, b]
    await _ack(store, a)
    assert await store.admin.waiting_on((await get(store, first)).seq) == [b]
    assert (await store.admin.queue_gauges()).oldest_deferred == {"child": NOW}
    await _ack(store, b)
    assert await store.admin.waiting_on((await get(store, first)).seq) == []
    assert await store.admin.oldest_deferred(["child"]) == {}
    assert (await store.admin.list_jobs(deferred, None, 5)).jobs == []
