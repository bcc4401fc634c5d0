"""Conformance: ``max_in_flight`` holds exactly at its bound on every backend while the
PostgreSQL backend skips the count of RESERVED jobs (the ``flow_counts`` bound, migration
0007, docs/decisions.md "A bound instead of a count"): the bound is used only while it
leaves room, an exact count takes over at the limit and one past it, and a lease that went
around the bound (a node with stale queue settings) is counted within 1 s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.backends import StoreSettings, store_settings

from sepp.domain.clock import FakeClock
from sepp.domain.params import FlowLimits, ReserveParams, SettleKind
from sepp.domain.records import JobRecord, QueueRecord
from sepp.domain.states import State
from sepp.storage.base import Store
from sepp.storage.factory import open_store
from storage.conformance_kit import LEASE, NOW, S, put, row, settle1

#: The byte budget of every reserve here (the engine always passes one).
BUDGET = 4 << 20
LIMIT = {"q": FlowLimits(max_in_flight=10)}


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    config = StoreSettings(data_dir=tmp_path, node_name="n", **store_settings(backend))
    s = open_store(config, FakeClock(NOW))
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def _reserve(store: Store, n: int, now: int = NOW, flow: dict[str, FlowLimits] | None = None) -> list[JobRecord]:
    return await store.reserve(ReserveParams(["q"], n, now, {"q": LEASE}, "w", BUDGET,
                                             flow=LIMIT if flow is None else flow))


async def test_the_limit_holds_at_its_bound_after_settles_loosen_the_bound(store: Store) -> None:
    await put(store, *[row() for _ in range(40)])
    first = await _reserve(store, 4) + await _reserve(store, 4)
    assert len(first) == 8
    for job in first:
        await settle1(store, job, SettleKind.ACK, NOW)
    # The bound (8 leased, none counted since) + 4 passes 10: counted exactly (0 RESERVED).
    assert len(await _reserve(store, 4)) == 4
    assert len(await _reserve(store, 6)) == 6          # 4 + 6 = 10: exactly at the limit
    assert await _reserve(store, 1) == []              # one past it: held back
    assert len(await _reserve(store, 16)) == 0


async def test_a_lease_around_the_bound_is_counted_within_one_second(store: Store) -> None:
    await put(store, *[row() for _ in range(40)])
    assert len(await _reserve(store, 2)) == 2
    # A node whose settings are stale (it sees the queue unlimited) leases 7 more.
    assert len(await _reserve(store, 7, flow={})) == 7
    # 1 s after the last exact count the next Reserve counts again: 9 RESERVED, 1 free.
    assert len(await _reserve(store, 4, now=NOW + S + 1)) == 1
    assert await _reserve(store, 4, now=NOW + S + 2) == []


async def test_a_limit_set_again_counts_the_jobs_leased_while_the_queue_was_unlimited(store: Store) -> None:
    # One node, no stale settings: the limit is lifted, jobs are leased (around the bound,
    # rightly: the queue is unlimited), and the limit is set again, all within 1 s of the
    # last exact count. The settings change must end that checkpoint (the queue row's
    # upsert forgets the bound), else the next Reserve leases past the limit.
    await put(store, *[row() for _ in range(40)])
    assert len(await _reserve(store, 2)) == 2                              # counted: 0, bound 2
    await store.upsert_queue(QueueRecord("q", '{"max_in_flight": 0}', False, True), NOW)
    assert len(await _reserve(store, 7, flow={})) == 7                     # unlimited: 9 RESERVED
    await store.upsert_queue(QueueRecord("q", '{"max_in_flight": 10}', False, True), NOW)
    assert len(await _reserve(store, 4, now=NOW + S // 2)) == 1           # 1 free, not 4
    assert await _reserve(store, 4, now=NOW + S // 2) == []


async def test_a_queue_deleted_and_made_again_starts_without_the_old_bound(store: Store) -> None:
    # A limited queue's bound, its jobs gone and the queue deleted; the name comes back
    # unlimited (an enqueue creates it) and leases; then it is limited again (declared).
    await put(store, *[row() for _ in range(3)])
    for job in await _reserve(store, 3):                                   # counted: 0, bound 3
        await settle1(store, job, SettleKind.ACK, NOW)
    await store.admin.purge("q", [int(State.COMPLETED)], 100)
    assert await store.admin.delete_queue("q")
    await put(store, *[row() for _ in range(20)], new_queues=[QueueRecord("q", "{}", False, False)])
    assert len(await _reserve(store, 8, flow={})) == 8                     # unlimited: 8 RESERVED
    await store.upsert_queue(QueueRecord("q", '{"max_in_flight": 10}', False, True), NOW)
    assert len(await _reserve(store, 5, now=NOW + S // 2)) == 2           # 2 free, not 5


@pytest.mark.postgres_only(reason="reads the bound of the PostgreSQL backend (flow_counts); SQLite counts")
async def test_reserves_that_find_no_job_leave_the_bound_where_it_was(store: Store) -> None:
    # An idle limited queue's long-polls reserve and find nothing; the bound grows by what
    # a Reserve picked, not by what it asked for, so they do not push it to the limit and
    # make every later Reserve count (a count is what the bound saves).
    await put(store, *[row() for _ in range(2)])
    assert len(await _reserve(store, 4)) == 2                              # counted: 0
    checkpoint = await store.reads.fetchrow("SELECT ck_leased, ck_at FROM flow_counts WHERE queue = 'q'")  # type: ignore[attr-defined]
    for i in range(20):
        assert await _reserve(store, 4, now=NOW + i) == []
    await put(store, *[row() for _ in range(10)])
    assert len(await _reserve(store, 3, now=NOW + 20)) == 3                # bound 2 + 3: no count
    assert await store.reads.fetchrow("SELECT ck_leased, ck_at FROM flow_counts WHERE queue = 'q'") == checkpoint  # type: ignore[attr-defined]
    assert len(await _reserve(store, 6, now=NOW + 21)) == 5               # 2 + 3 + 6 > 10: counted, 5 free


async def test_a_queue_deleted_and_made_again_starts_with_a_full_bucket(store: Store) -> None:
    # The old queue spent its burst of 3 (one token an hour after that); deleted and made
    # again, the new one draws from a full bucket, not from the old one's empty one.
    rate = {"q": FlowLimits(rate_amount=1, rate_period=3600 * S, rate_burst=3)}
    await put(store, *[row() for _ in range(5)])
    spent = await _reserve(store, 5, flow=rate)
    assert len(spent) == 3 and await _reserve(store, 5, flow=rate) == []   # at the limit, one past it
    for job in spent + await _reserve(store, 5, flow={}):
        await settle1(store, job, SettleKind.ACK, NOW)
    await store.admin.purge("q", [int(State.COMPLETED)], 100)
    assert await store.admin.delete_queue("q")
    await put(store, *[row() for _ in range(5)], new_queues=[QueueRecord("q", "{}", False, False)])
    assert len(await _reserve(store, 5, flow=rate)) == 3
