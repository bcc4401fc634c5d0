"""Conformance: what the job-type figures and the bulk actions read
from a store, on every backend — the job type of each settle result and of each reclaimed
lease, the adds and reads of ``AdminStore.add_type_figures`` / ``type_figures`` (added,
never overwritten, as two nodes would; the longest run by max; hour and day windows; the
prune; a deleted queue's rows gone) and ``AdminStore.count_jobs``.
"""

from __future__ import annotations

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.storage.admin import JobQuery
from sepp.storage.base import Store
from sepp.storage.type_figures import TypeFiguresRead, TypeMinute, TypeRunBucket, TypeTotals
from storage.conformance_kit import LEASE, NOW, POLICY, S, lease, put, row, settle1

M = 29_833_333  # a minute number (µs // 60 s) near NOW
H = M - M % 60  # the first minute of its hour


async def test_settle_results_name_the_job_type_batched_or_one_by_one(store: Store) -> None:
    await put(store, row(job_type="mail"), row(job_type="sms"), row(job_type="pdf"), row(job_type="csv"))
    recs = await lease(store, n=4)
    by_id = {r.id: r.job_type for r in recs}
    acks = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + S) for r in recs[:2]]
    results = await store.settle(acks, POLICY)  # the batched ack statement
    assert [r.job_type for r in results] == [by_id[recs[0].id], by_id[recs[1].id]]
    retried = await settle1(store, recs[2], SettleKind.RETRY, NOW + 2 * S, delay=0)
    dead = await settle1(store, recs[3], SettleKind.DEAD_LETTER, NOW + 3 * S)
    assert (retried.job_type, dead.job_type) == (by_id[recs[2].id], by_id[recs[3].id])


async def test_a_reclaim_counts_its_outcomes_by_queue_and_job_type(store: Store) -> None:
    await put(store, row("a", job_type="x", max_attempts=1), row("a", job_type="x", max_attempts=3),
              row("a", job_type="y", max_attempts=3), row("b", job_type="x", max_attempts=3))
    await lease(store, "a", n=3)
    await lease(store, "b")
    result = await store.reclaim_expired(NOW + LEASE, 100, POLICY)
    ready, dead = int(State.READY), int(State.DEAD_LETTERED)
    assert result.expired_types == {("a", "x", dead): 1, ("a", "x", ready): 1, ("a", "y", ready): 1,
                                    ("b", "x", ready): 1}


async def test_type_figures_are_added_up_and_read_per_window(store: Store) -> None:
    admin = store.admin
    hour, day = M - 59, H - 23 * 60
    # Minute rows (step 1) feed the hour's read, hour rows (step 60) the day's.
    first = [TypeMinute("q", "mail", 1, M, 5, 1, 0, 6, 900), TypeMinute("q", "mail", 1, M - 100, 2, 0, 1, 3, 4000),
             TypeMinute("q", "mail", 60, H, 5, 1, 0, 6, 900), TypeMinute("q", "mail", 60, H - 120, 2, 0, 1, 3, 4000),
             TypeMinute("q", "sms", 1, M, 1, 0, 0, 1, 50), TypeMinute("q", "sms", 60, H, 1, 0, 0, 1, 50),
             TypeMinute("other-queue", "mail", 1, M, 9, 9, 9, 9, 9)]
    runs = [TypeRunBucket("q", "mail", 1, M, 70, 4), TypeRunBucket("q", "mail", 1, M, 71, 2),
            TypeRunBucket("q", "mail", 60, H, 70, 4), TypeRunBucket("q", "mail", 60, H, 71, 2),
            TypeRunBucket("q", "mail", 60, H - 120, 71, 3), TypeRunBucket("q", "sms", 1, M, 40, 1),
            TypeRunBucket("q", "sms", 60, H, 40, 1)]
    await admin.add_type_figures(first, runs, M - 120, H - 24 * 60)
    # A second node (or flush) adds to the same rows: counts summed, the longest run by max.
    await admin.add_type_figures([TypeMinute("q", "mail", 1, M, 1, 0, 2, 1, 600), TypeMinute("q", "mail", 60, H, 1, 0,
                                                                                               2, 1, 600)],
                                 [TypeRunBucket("q", "mail", 1, M, 70, 1), TypeRunBucket("q", "mail", 60, H, 70, 1)],
                                 M - 120, H - 24 * 60)
    got = await admin.type_figures("q", day, hour)
    assert got == TypeFiguresRead(
        totals={"mail": (TypeTotals(8, 1, 3, 10, 4000), TypeTotals(6, 1, 2, 7, 900)),
                "sms": (TypeTotals(1, 0, 0, 1, 50), TypeTotals(1, 0, 0, 1, 50))},
        buckets={"mail": {70: (5, 5), 71: (5, 2)}, "sms": {40: (1, 1)}})
    assert await admin.type_figures("nothing-here", day, hour) == TypeFiguresRead({}, {})


async def test_old_type_figures_are_pruned_per_step_and_a_deleted_queue_loses_its_own(store: Store) -> None:
    admin = store.admin
    rows = [TypeMinute("q", "t", 1, M - 121, 1, 0, 0, 1, 10), TypeMinute("q", "t", 1, M - 120, 1, 0, 0, 1, 20),
            TypeMinute("q", "t", 60, H - 25 * 60, 1, 0, 0, 1, 30),
            TypeMinute("q", "t", 60, H - 24 * 60, 1, 0, 0, 1, 40)]
    runs = [TypeRunBucket("q", "t", 1, M - 121, 5, 1), TypeRunBucket("q", "t", 1, M - 120, 6, 1),
            TypeRunBucket("q", "t", 60, H - 25 * 60, 7, 1), TypeRunBucket("q", "t", 60, H - 24 * 60, 8, 1)]
    # Kept: minute rows from M - 120 on, hour rows from H - 24 h on (the bounds themselves kept).
    await admin.add_type_figures(rows, runs, M - 120, H - 24 * 60)
    got = await admin.type_figures("q", H - 30 * 60, M - 500)   # wider reads still find the old rows gone
    assert got.totals == {"t": (TypeTotals(1, 0, 0, 1, 40), TypeTotals(1, 0, 0, 1, 20))}
    assert got.buckets == {"t": {6: (0, 1), 8: (1, 0)}}
    assert await admin.delete_queue("q")
    assert await admin.type_figures("q", H - 30 * 60, M - 500) == TypeFiguresRead({}, {})


async def test_count_jobs_counts_one_state_of_one_queue_by_type_and_finish_time(store: Store) -> None:
    await put(store, row("q", job_type="a"), row("q", job_type="a"), row("q", job_type="b"), row("r", job_type="a"),
              row("q", job_type="a", state=State.SCHEDULED, run_at=NOW + 60 * S))
    ready = int(State.READY)
    assert await store.admin.count_jobs(JobQuery(queue="q", state=ready)) == 3
    assert await store.admin.count_jobs(JobQuery(queue="q", state=ready, job_type="a")) == 2
    assert await store.admin.count_jobs(JobQuery(queue="q", state=int(State.SCHEDULED))) == 1
    assert await store.admin.count_jobs(JobQuery(queue="q", state=ready, job_type="none")) == 0
    recs = await lease(store, "q", n=3)
    for i, rec in enumerate(recs):
        await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + (i + 1) * S)
    dead = int(State.DEAD_LETTERED)
    assert await store.admin.count_jobs(JobQuery(queue="q", state=dead)) == 3
    # Finish-time bounds: after <= finished_at < before (the bulk run's snapshot).
    assert await store.admin.count_jobs(JobQuery(queue="q", state=dead, finished_before=NOW + 2 * S)) == 1
    assert await store.admin.count_jobs(JobQuery(queue="q", state=dead, finished_before=NOW + 2 * S + 1)) == 2
    assert await store.admin.count_jobs(JobQuery(queue="q", state=dead, finished_after=NOW + 3 * S)) == 1
