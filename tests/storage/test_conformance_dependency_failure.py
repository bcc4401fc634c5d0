"""Conformance: what a dead-lettered or cancelled dependency does to the jobs that wait for
it (docs/workflows.md "When a dependency fails"), on every backend — each failure policy
("cancel", the default; "run"; "wait"), the cancel's propagation down the graph in the same
commit, whatever path failed the dependency (a nack, a lease expiry, an admin cancel), the
revival of the cancelled dependents by a redrive (one job, or a bulk redrive; opt-out), and
a dependency that had failed already when the job was enqueued."""

from __future__ import annotations

from sepp.domain.ids import job_id_text
from sepp.domain.listing import DeadFilter
from sepp.domain.params import SettleKind
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.storage.base import Store
from sepp.storage.dependencies import CANCEL, RUN, WAIT
from storage.conformance_kit import LEASE, NOW, POLICY, S, get, lease, put, row, settle1


async def _running(store: Store, n: int, queue: str = "dep", max_attempts: int = 5) -> list[bytes]:
    rows = [row(queue, max_attempts=max_attempts) for _ in range(n)]
    await put(store, *rows)
    recs = await lease(store, queue, n=n)
    assert len(recs) == n
    return [r.id for r in recs]


async def _child(store: Store, deps: list[bytes], on_failure: int = CANCEL, queue: str = "child") -> bytes:
    child = row(queue)
    assert await store.enqueue([child], [0], NOW, depends_on={0: deps}, on_failure={0: on_failure}) == {}
    return child.id


async def _dead(store: Store, job_id: bytes, now: int = NOW + S) -> None:
    result = await settle1(store, await get(store, job_id), SettleKind.DEAD_LETTER, now, reason="boom")
    assert result.state == State.DEAD_LETTERED


async def _ack(store: Store, job_id: bytes, now: int = NOW + 3 * S) -> None:
    result = await settle1(store, await get(store, job_id), SettleKind.ACK, now)
    assert result.state == State.COMPLETED


def _named(rec: JobRecord, dep: bytes, what: str = "dead-lettered") -> bool:
    return rec.state == State.CANCELLED and rec.reason == f"DEPENDENCY_FAILED: dependency {job_id_text(dep)} was {what}"


async def test_cancel_is_the_default_and_names_the_failed_dependency(store: Store) -> None:
    a, b = await _running(store, 2)
    child = await _child(store, [a, b])
    await _dead(store, a)
    rec = await get(store, child)
    assert _named(rec, a) and rec.finished_at == NOW + S
    await _ack(store, b)  # a later completion of its other dependency does not bring it back
    assert (await get(store, child)).state == State.CANCELLED
    assert await lease(store, "child", n=5, now=NOW + 4 * S) == []


async def test_a_cancel_propagates_through_three_levels_in_the_same_commit(store: Store) -> None:
    (a,) = await _running(store, 1)
    b = await _child(store, [a])
    c = await _child(store, [b])
    d = await _child(store, [c])
    run_after_c = await _child(store, [c], on_failure=RUN)
    wait_after_c = await _child(store, [c], on_failure=WAIT)
    await _dead(store, a)
    assert _named(await get(store, b), a)
    assert _named(await get(store, c), b, "cancelled")
    assert _named(await get(store, d), c, "cancelled")
    assert (await get(store, run_after_c)).state == State.READY
    assert (await get(store, wait_after_c)).state == State.DEFERRED


async def test_run_releases_the_job_when_its_other_dependencies_allow(store: Store) -> None:
    a, b = await _running(store, 2)
    child = await _child(store, [a, b], on_failure=RUN)
    alone = await _child(store, [a], on_failure=RUN)
    await _dead(store, a)
    assert (await get(store, alone)).state == State.READY
    assert (await get(store, child)).state == State.DEFERRED
    await _ack(store, b)
    assert (await get(store, child)).state == State.READY
    # a redrive of the failed dependency that then completes does not release it again
    assert (await store.admin.requeue(a, NOW + 4 * S)).state == State.READY
    (again,) = await lease(store, "dep", now=NOW + 5 * S)
    await _ack(store, again.id, NOW + 6 * S)
    assert sorted(r.id for r in await lease(store, "child", n=5, now=NOW + 7 * S)) == sorted([child, alone])


async def test_wait_keeps_it_deferred_until_the_dependency_is_redriven_and_completes(store: Store) -> None:
    (a,) = await _running(store, 1)
    child = await _child(store, [a], on_failure=WAIT)
    await _dead(store, a)
    assert (await get(store, child)).state == State.DEFERRED
    await store.admin.requeue(a, NOW + 2 * S)
    (again,) = await lease(store, "dep", now=NOW + 2 * S)
    await settle1(store, again, SettleKind.RETRY, NOW + 3 * S, delay=0)  # a retry releases nothing
    assert (await get(store, child)).state == State.DEFERRED
    (third,) = await lease(store, "dep", now=NOW + 4 * S)
    await _ack(store, third.id, NOW + 5 * S)
    assert (await get(store, child)).state == State.READY


async def test_a_redrive_revives_the_dependents_cancelled_because_of_it(store: Store) -> None:
    (a,) = await _running(store, 1)
    b = await _child(store, [a])
    c = await _child(store, [b])
    await _dead(store, a)
    assert (await get(store, c)).state == State.CANCELLED
    await store.admin.requeue(a, NOW + 2 * S)
    for job in (b, c):
        rec = await get(store, job)
        assert (rec.state, rec.reason, rec.finished_at) == (State.DEFERRED, None, None)
    (again,) = await lease(store, "dep", now=NOW + 2 * S)
    await _ack(store, again.id)
    assert (await get(store, b)).state == State.READY and (await get(store, c)).state == State.DEFERRED


async def test_a_redrive_without_dependents_leaves_them_cancelled(store: Store) -> None:
    (a,) = await _running(store, 1)
    b = await _child(store, [a])
    await _dead(store, a)
    await store.admin.requeue(a, NOW + 2 * S, revive_dependents=False)
    assert _named(await get(store, b), a)
    (again,) = await lease(store, "dep", now=NOW + 2 * S)
    await _ack(store, again.id)
    # requeued by hand later, it waits for nothing: READY
    await store.admin.requeue(b, NOW + 4 * S)
    assert (await get(store, b)).state == State.READY


async def test_a_dependent_with_another_failed_dependency_stays_cancelled_naming_it(store: Store) -> None:
    a, x = await _running(store, 2)
    child = await _child(store, [a, x])
    await _dead(store, a)
    await _dead(store, x, NOW + 2 * S)
    await store.admin.requeue(a, NOW + 3 * S)
    assert _named(await get(store, child), x)
    await store.admin.requeue(x, NOW + 4 * S)
    assert (await get(store, child)).state == State.DEFERRED


async def test_a_bulk_redrive_revives_the_dependents(store: Store) -> None:
    a, b = await _running(store, 2)
    ca, cb = await _child(store, [a]), await _child(store, [b])
    await _dead(store, a)
    await _dead(store, b)
    moved = await store.admin.requeue_dead(DeadFilter(queue="dep"), NOW + 2 * S, 10)
    assert sorted(m[0] for m in moved) == sorted([a, b])
    assert {(await get(store, j)).state for j in (ca, cb)} == {State.DEFERRED}


async def test_a_lease_expiry_on_the_last_attempt_cancels_the_dependents(store: Store) -> None:
    (a,) = await _running(store, 1, max_attempts=1)
    child = await _child(store, [a])
    await store.reclaim_expired(NOW + LEASE + S, 100, POLICY)
    assert (await get(store, a)).state == State.DEAD_LETTERED
    assert _named(await get(store, child), a)


async def test_an_admin_cancel_of_a_deferred_job_cancels_its_dependents(store: Store) -> None:
    (a,) = await _running(store, 1)
    b = await _child(store, [a])
    c = await _child(store, [b])
    assert (await store.admin.cancel(b, NOW + S, POLICY, "")).state == State.CANCELLED
    assert _named(await get(store, c), b, "cancelled")
    await _ack(store, a)  # b stays cancelled; its completed dependency is counted
    assert (await get(store, b)).state == State.CANCELLED


async def test_a_dependency_failed_before_the_enqueue_applies_the_policy_at_once(store: Store) -> None:
    a, b = await _running(store, 2)
    await _dead(store, a)
    cancelled = await _child(store, [b, a])
    assert _named(await get(store, cancelled), a)
    ran = await _child(store, [a], on_failure=RUN)
    assert (await get(store, ran)).state == State.READY
    waits = await _child(store, [a], on_failure=WAIT)
    assert (await get(store, waits)).state == State.DEFERRED
    await store.admin.requeue(a, NOW + 2 * S)  # revives the cancelled one
    assert (await get(store, cancelled)).state == State.DEFERRED
    (again,) = await lease(store, "dep", now=NOW + 2 * S)
    await _ack(store, again.id)
    await _ack(store, b)
    assert {(await get(store, j)).state for j in (cancelled, waits)} == {State.READY}


async def test_reserving_nacking_and_a_lease_expiry_of_a_dependency_fail_nothing(store: Store) -> None:
    await put(store, row("dep", max_attempts=3))
    (a,) = [r.id for r in await lease(store, "dep")]
    children = [await _child(store, [a], on_failure=p) for p in (CANCEL, RUN, WAIT)]
    await settle1(store, await get(store, a), SettleKind.RETRY, NOW + S, delay=0)
    (again,) = await lease(store, "dep", now=NOW + 2 * S)
    await settle1(store, again, SettleKind.RELEASE, NOW + 2 * S)
    await lease(store, "dep", now=NOW + 3 * S)
    await store.reclaim_expired(NOW + 3 * S + LEASE + S, 100, POLICY)  # attempts left: back to READY
    assert (await get(store, a)).state == State.READY
    assert [(await get(store, c)).state for c in children] == [State.DEFERRED] * 3
    assert await lease(store, "child", n=5, now=NOW + 4 * S + LEASE) == []
