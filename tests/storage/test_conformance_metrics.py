"""Conformance: what the metrics read from a store — ``AdminStore.queue_gauges``
(counts per state and oldest READY of every queue), the started_at of a settled attempt,
the run_at of promoted jobs, the expired leases per queue of a reclaim, and the commit
histograms of ``Store.figures`` — on every backend.
"""

from __future__ import annotations

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.storage.admin import QueueGauges, StateCounts
from sepp.storage.base import Store
from sepp.storage.commit_stats import JOBS_BUCKETS, SECONDS_BUCKETS
from storage.conformance_kit import LEASE, NOW, POLICY, lease, put, row, settle1

SCHEDULED = State.SCHEDULED


async def test_queue_gauges_count_every_state_and_find_the_oldest_ready_job(store: Store) -> None:
    assert await store.admin.queue_gauges() == QueueGauges({}, {})
    await put(store, row("a", priority=9, run_at=NOW - 2), row("a", priority=0, run_at=NOW - 9),
              row("a", state=SCHEDULED, run_at=NOW + 50), row("b", run_at=NOW - 1), row("b"), row("c"))
    (done,) = await lease(store, "b")
    await settle1(store, done, SettleKind.ACK, NOW + 1)
    (held,) = await lease(store, "c")
    gauges = await store.admin.queue_gauges()
    assert gauges.counts == {"a": StateCounts(scheduled=1, ready=2), "b": StateCounts(ready=1, completed=1),
                             "c": StateCounts(reserved=1)}
    # The oldest READY job whatever its priority; a queue without READY jobs has no entry.
    assert gauges.oldest_ready == {"a": NOW - 9, "b": NOW}
    assert held.queue == "c"


async def test_a_settle_reports_when_the_attempt_was_leased(store: Store) -> None:
    await put(store, row(), row(), row(), row(max_attempts=1))
    recs = await lease(store, n=4, now=NOW + 5)
    # A batch of acks (the batched statement) and single nacks both report started_at.
    acks = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + 9) for r in recs[:2]]
    results = await store.settle(acks, POLICY)
    assert [(r.error, r.started_at) for r in results] == [(None, NOW + 5)] * 2
    retried = await settle1(store, recs[2], SettleKind.RETRY, NOW + 10, delay=0)
    dead = await settle1(store, recs[3], SettleKind.RETRY, NOW + 11)
    assert (retried.state, retried.started_at) == (int(State.READY), NOW + 5)
    assert (dead.state, dead.started_at) == (int(State.DEAD_LETTERED), NOW + 5)
    # A repeated ack writes nothing and reports no attempt.
    again = await settle1(store, recs[0], SettleKind.ACK, NOW + 12)
    assert (again.error, again.run_at, again.started_at) == (None, 0, 0)


async def test_promotion_reports_the_run_at_of_each_job_it_made_ready(store: Store) -> None:
    await put(store, row("a", state=SCHEDULED, run_at=NOW + 3), row("b", state=SCHEDULED, run_at=NOW + 1),
              row("c", state=SCHEDULED, run_at=NOW + 9))
    result = await store.promote_due(NOW + 5, 100)
    assert sorted(result.promoted_run_at) == [NOW + 1, NOW + 3]
    assert (await store.promote_due(NOW + 5, 100)).promoted_run_at == ()


async def test_a_reclaim_counts_the_expired_leases_of_each_queue(store: Store) -> None:
    await put(store, row("a", max_attempts=1), row("a", max_attempts=3), row("b", max_attempts=3))
    await lease(store, "a", n=2)
    await lease(store, "b")
    result = await store.reclaim_expired(NOW + LEASE, 100, POLICY)
    # Every expired lease counts, back to READY or dead-lettered on its last attempt.
    assert (result.count, result.expired, result.dead_lettered) == (3, {"a": 2, "b": 1}, {"a": 1})
    assert (await store.reclaim_expired(NOW + LEASE, 100, POLICY)).expired == {}


async def test_the_figures_hold_one_commit_histogram_entry_per_committed_transaction(store: Store) -> None:
    before = store.figures()
    await put(store, *(row() for _ in range(5)))
    await put(store, row())
    after = store.figures()
    stats, old = after.commit_stats, before.commit_stats
    commits = after.commits - before.commits
    assert commits >= 2
    assert len(stats.jobs_counts) == len(JOBS_BUCKETS) + 1 and len(stats.seconds_counts) == len(SECONDS_BUCKETS) + 1
    assert sum(stats.jobs_counts) - sum(old.jobs_counts) == commits
    assert sum(stats.seconds_counts) - sum(old.seconds_counts) == commits
    # The two enqueues weigh their jobs (other commits in between, e.g. queue rows, weigh 0).
    assert stats.jobs_sum - old.jobs_sum == 6
    assert stats.seconds_sum > old.seconds_sum
