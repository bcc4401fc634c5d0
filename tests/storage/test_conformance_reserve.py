"""Conformance: ``Store.reserve`` — reserve order (priority, run_at, seq), queue order,
``max_jobs`` and ``max_bytes`` at the limit and one past, the lease it hands out, and the
promotion it does first (SPEC §3).
"""

from __future__ import annotations

from sepp.domain.params import ReserveParams, SettleKind
from sepp.domain.states import State
from sepp.storage.base import Store
from storage.conformance_kit import LEASE, NOW, POLICY, S, get, lease, put, row, settle1


async def test_jobs_come_out_by_priority_then_run_at_then_enqueue_order(store: Store) -> None:
    low_early = row(priority=1, run_at=NOW - 9)
    high_late = row(priority=9, run_at=NOW - 1)
    high_early = row(priority=9, run_at=NOW - 5)
    tie_a, tie_b = row(priority=5, run_at=NOW - 3), row(priority=5, run_at=NOW - 3)
    await put(store, low_early, tie_a, high_late)
    await put(store, tie_b, high_early)
    expected = [high_early.id, high_late.id, tie_a.id, tie_b.id, low_early.id]
    one_by_one = [(await lease(store))[0].id for _ in range(3)]
    rest = [r.id for r in await lease(store, n=10)]
    assert one_by_one + rest == expected


async def test_a_batch_reserve_returns_the_same_order(store: Store) -> None:
    rows = [row(priority=p, run_at=NOW - t) for p, t in [(0, 1), (3, 1), (3, 2), (0, 2)]]
    await put(store, *rows)
    got = await lease(store, n=4)
    assert [r.id for r in got] == [rows[2].id, rows[1].id, rows[3].id, rows[0].id]


async def test_queues_are_served_in_the_order_asked_and_max_jobs_spans_them(store: Store) -> None:
    a = [row("a") for _ in range(2)]
    b = [row("b") for _ in range(3)]
    await put(store, *b, *a)
    got = await lease(store, "a", "b", n=4)
    assert [r.id for r in got] == [a[0].id, a[1].id, b[0].id, b[1].id]
    assert [r.queue for r in got] == ["a", "a", "b", "b"]
    assert await lease(store, "missing", "a") == []
    assert [r.id for r in await lease(store, "missing", "b", n=5)] == [b[2].id]


async def test_max_jobs_at_the_number_ready_and_one_below(store: Store) -> None:
    rows = [row() for _ in range(3)]
    await put(store, *rows)
    assert len(await lease(store, n=2)) == 2
    assert (await get(store, rows[2].id)).state == State.READY
    assert [r.id for r in await lease(store, n=1)] == [rows[2].id]
    assert await lease(store, n=1) == []


async def test_max_bytes_stops_at_the_budget_and_takes_the_first_job_anyway(store: Store) -> None:
    rows = [row(payload=bytes(10)) for _ in range(9)]
    await put(store, *rows)
    assert len(await lease(store, n=10, max_bytes=30)) == 3   # exactly at the budget
    assert len(await lease(store, n=10, max_bytes=29)) == 2   # one byte short of three
    assert len(await lease(store, n=10, max_bytes=5)) == 1    # the first job even past the budget
    assert len(await lease(store, n=10, max_bytes=0)) == 3    # 0 = no limit


async def test_max_bytes_counts_across_queues(store: Store) -> None:
    a, b = row("a", payload=bytes(8)), row("b", payload=bytes(8))
    await put(store, a, b)
    assert [r.id for r in await lease(store, "a", "b", n=5, max_bytes=15)] == [a.id]
    assert [r.id for r in await lease(store, "a", "b", n=5, max_bytes=15)] == [b.id]


async def test_a_lease_carries_one_fresh_id_per_call_its_expiry_worker_and_attempt(store: Store) -> None:
    rows = [row("a"), row("b"), row("a")]
    await put(store, *rows)
    first = await store.reserve(_params(["a", "b"], 2, NOW, {"a": 7 * S, "b": 9 * S}))
    assert [r.id for r in first] == [rows[0].id, rows[2].id]
    second = await lease(store, "b", worker="w2", now=NOW + 1)
    lease_ids = {r.lease_id for r in first}
    assert len(lease_ids) == 1 and len(first[0].lease_id or b"") == 16
    assert second[0].lease_id not in lease_ids and len(second[0].lease_id or b"") == 16
    for rec in first:
        assert (rec.state, rec.attempt, rec.lease_expires_at, rec.worker_id, rec.started_at) == (
            int(State.RESERVED), 1, NOW + 7 * S, "w1", NOW)
        stored = await get(store, rec.id)
        assert (stored.state, stored.attempt, stored.lease_id, stored.lease_expires_at, stored.worker_id,
                stored.started_at) == (int(State.RESERVED), 1, rec.lease_id, NOW + 7 * S, "w1", NOW)
    assert (second[0].lease_expires_at, second[0].worker_id, second[0].payload) == (NOW + 1 + LEASE, "w2", b"p")


async def test_a_reserved_job_is_not_handed_out_twice(store: Store) -> None:
    await put(store, row())
    assert len(await lease(store)) == 1
    assert await lease(store, now=NOW + 1) == []


async def test_reserve_promotes_due_scheduled_jobs_first(store: Store) -> None:
    early = row(state=State.SCHEDULED, run_at=NOW + 5 * S, priority=0)
    late = row(state=State.SCHEDULED, run_at=NOW + 6 * S, priority=9)
    await put(store, early, late)
    assert await lease(store, n=5, now=NOW + 5 * S - 1) == []
    got = await lease(store, n=5, now=NOW + 5 * S)  # due at exactly run_at
    assert [r.id for r in got] == [early.id]
    assert (await get(store, late.id)).state == State.SCHEDULED
    assert [r.id for r in await lease(store, n=5, now=NOW + 7 * S)] == [late.id]


async def test_scheduled_and_finished_jobs_are_never_reserved(store: Store) -> None:
    await put(store, row(state=State.SCHEDULED, run_at=NOW + S))
    assert await lease(store) == []
    assert await lease(store, "nothing-here") == []


def _params(queues: list[str], n: int, now: int, lease_for: dict[str, int]) -> ReserveParams:
    return ReserveParams(queues, n, now, lease_for, "w1")


async def test_max_bytes_counts_the_history_of_retried_jobs_in_utf8_bytes(store: Store) -> None:
    """A retried job's attempt history (its error text non-ASCII) counts toward the budget,
    on every backend by the same measure; the budget at exactly a job's size takes it, one
    byte under does not (the first job of a call is taken anyway)."""
    a, b = row(payload=bytes(10)), row(payload=bytes(10))
    await put(store, a, b)
    (ra,) = await lease(store, n=1)
    await settle1(store, ra, SettleKind.RETRY, NOW + S, delay=0, error_message="déjà vu ✓ 💥",
                  error_detail="x" * 7, policy=POLICY)
    history = (await get(store, a.id)).history
    assert history
    n = 10 + len(history.encode())   # the retried job: payload + its history's UTF-8 bytes
    # reserve order: a (run_at NOW + S) after b (run_at NOW)
    assert [r.id for r in await lease(store, n=5, now=NOW + 2 * S, max_bytes=10 + n)] == [b.id, a.id]
    assert await store.settle([], POLICY) == []   # an empty settle: nothing, no error


async def test_max_bytes_one_byte_under_a_retried_jobs_size_stops_before_it(store: Store) -> None:
    a, b = row(payload=bytes(10)), row(payload=bytes(10))
    await put(store, a, b)
    (ra,) = await lease(store, n=1)
    await settle1(store, ra, SettleKind.RETRY, NOW + S, delay=0, error_message="naïve — ✓", policy=POLICY)
    n = 10 + len(((await get(store, a.id)).history or "").encode())
    assert [r.id for r in await lease(store, n=5, now=NOW + 2 * S, max_bytes=10 + n - 1)] == [b.id]
    assert [r.id for r in await lease(store, n=5, now=NOW + 2 * S, max_bytes=1)] == [a.id]   # first anyway


async def test_max_bytes_across_queues_a_first_job_over_the_budget_ends_the_call(store: Store) -> None:
    big, small_a, small_b = row("a", payload=bytes(50)), row("a", payload=bytes(5)), row("b", payload=bytes(5))
    await put(store, big, small_a, small_b)
    # the first job is taken past the budget; nothing more fits, from this queue or the next
    assert [r.id for r in await lease(store, "a", "b", n=5, max_bytes=20)] == [big.id]
    # max_jobs 1 with a budget: one job
    assert [r.id for r in await lease(store, "a", "b", n=1, max_bytes=20)] == [small_a.id]
    # the second queue's job within what the first left: 5 + 5 = 10, exactly at the budget
    c = row("a", payload=bytes(5))
    await put(store, c)
    assert [r.id for r in await lease(store, "a", "b", n=5, max_bytes=10)] == [c.id, small_b.id]
