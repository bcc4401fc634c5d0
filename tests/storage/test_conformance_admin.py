"""Conformance: ``AdminStore`` — keyset-paged listings (each job exactly once, every sort
order, filters), state counts, oldest READY, throughput rows, cancel, requeue, bulk redrive,
delete, purge and queue deletion (SPEC §4, §6).
"""

from __future__ import annotations

import pytest

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.records import QueueRecord
from sepp.domain.states import State
from sepp.storage.admin import DeadFilter, JobQuery, MinuteRow, Outcome, StateCounts, WriteResult
from sepp.storage.base import Store
from storage.conformance_kit import LEASE, NOW, POLICY, S, get, lease, put, row, settle1

SCHEDULED, READY, RESERVED = State.SCHEDULED, State.READY, State.RESERVED
COMPLETED, DEAD, CANCELLED = State.COMPLETED, State.DEAD_LETTERED, State.CANCELLED


async def _walk(store: Store, query: JobQuery, limit: int) -> list[list[bytes]]:
    """Every page of a listing, as job ids; asserts the last page (and only it) has no next key."""
    pages: list[list[bytes]] = []
    after = None
    while True:
        page = await store.admin.list_jobs(query, after, limit)
        pages.append([s.record.id for s in page.jobs])
        if page.next_key is None:
            return pages
        assert len(page.jobs) == limit
        after = page.next_key
        assert len(pages) < 100, "listing does not end"


async def _mixed(store: Store) -> dict[State, list[bytes]]:
    """12 jobs in every state over queues a and b; {state: ids in enqueue order}."""
    ready = [row("a", priority=p, run_at=NOW - i) for i, p in enumerate([1, 5, 5, 0])] + [row("b"), row("b")]
    sched = [row("a", state=SCHEDULED, run_at=NOW + t * S) for t in (9, 3, 6)]
    leased = [row("b", priority=9) for _ in range(3)]
    await put(store, *ready, *sched)
    await put(store, *leased)
    recs = await lease(store, "b", n=3)
    assert [r.id for r in recs] == [r.id for r in leased]
    await settle1(store, recs[0], SettleKind.ACK, NOW + 1)
    await settle1(store, recs[1], SettleKind.DEAD_LETTER, NOW + 2, reason="BAD_INPUT")
    await store.admin.cancel(sched[2].id, NOW + 3, POLICY, "operator")
    return {READY: [r.id for r in ready], SCHEDULED: [sched[0].id, sched[1].id], RESERVED: [leased[2].id],
            COMPLETED: [leased[0].id], DEAD: [leased[1].id], CANCELLED: [sched[2].id]}


@pytest.mark.parametrize("limit", [1, 2, 3, 100])
async def test_every_listing_pages_each_job_exactly_once(store: Store, limit: int) -> None:
    ids = await _mixed(store)
    everything = [i for group in ids.values() for i in group]
    pages = await _walk(store, JobQuery(), limit)
    flat = [i for p in pages for i in p]
    assert sorted(flat) == sorted(everything) and len(flat) == len(set(flat)) == 12
    for state, expected in ids.items():
        got = [i for p in await _walk(store, JobQuery(state=int(state)), limit) for i in p]
        assert sorted(got) == sorted(expected), state.name


async def test_listing_orders(store: Store) -> None:
    ids = await _mixed(store)
    a_ready = ids[READY][:4]
    # READY: queue by queue, each in reserve order (priority desc, run_at, seq).
    ready = [i for p in await _walk(store, JobQuery(state=int(READY)), 2) for i in p]
    assert ready == [a_ready[2], a_ready[1], a_ready[0], a_ready[3], *ids[READY][4:]]
    # SCHEDULED by run_at; any state by enqueue order.
    assert [i for p in await _walk(store, JobQuery(state=int(SCHEDULED)), 1) for i in p] == [
        ids[SCHEDULED][1], ids[SCHEDULED][0]]
    (any_a,) = await _walk(store, JobQuery(queue="a"), 100)
    assert any_a == [*a_ready, ids[SCHEDULED][0], ids[SCHEDULED][1], ids[CANCELLED][0]]


async def test_finished_listings_are_newest_first_and_filter_by_time_and_reason(store: Store) -> None:
    rows = [row() for _ in range(4)]
    await put(store, *rows)
    recs = await lease(store, n=4)
    for i, rec in enumerate(recs):
        await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + i, reason="BAD" if i % 2 else "OTHER_REASON")
    dead = int(DEAD)
    assert [i for p in await _walk(store, JobQuery(state=dead), 1) for i in p] == [r.id for r in reversed(recs)]
    window = JobQuery(state=dead, finished_after=NOW + 1, finished_before=NOW + 3)  # [after, before)
    assert [i for p in await _walk(store, window, 1) for i in p] == [recs[2].id, recs[1].id]
    bad = JobQuery(state=dead, reason_prefix="BA")
    assert [i for p in await _walk(store, bad, 10) for i in p] == [recs[3].id, recs[1].id]
    assert await _walk(store, JobQuery(state=dead, reason_prefix="BADX"), 10) == [[]]


async def test_listing_filters_by_queue_and_job_type(store: Store) -> None:
    x, y, z = row("a", job_type="x"), row("a", job_type="y"), row("b", job_type="x")
    await put(store, x, y, z)
    assert await _walk(store, JobQuery(job_type="x"), 10) == [[x.id, z.id]]
    assert await _walk(store, JobQuery(state=int(READY), queue="a", job_type="x"), 10) == [[x.id]]
    assert await _walk(store, JobQuery(state=int(READY), queue="c"), 10) == [[]]


async def test_a_page_exactly_full_is_the_last_page(store: Store) -> None:
    await put(store, *[row() for _ in range(3)])
    for state in (None, int(READY)):
        assert (await store.admin.list_jobs(JobQuery(state=state), None, 3)).next_key is None
        assert (await store.admin.list_jobs(JobQuery(state=state), None, 2)).next_key is not None


async def test_a_position_of_another_order_is_refused(store: Store) -> None:
    await put(store, row(), row())
    page = await store.admin.list_jobs(JobQuery(state=int(READY)), None, 1)
    assert page.next_key is not None
    with pytest.raises(ValueError):
        await store.admin.list_jobs(JobQuery(state=int(SCHEDULED)), page.next_key, 1)
    with pytest.raises(ValueError):
        await store.admin.list_jobs(JobQuery(state=int(READY), queue="other"), page.next_key, 1)
    with pytest.raises(ValueError):
        await store.admin.list_jobs(JobQuery(), ["not", "a", "position"], 1)


async def test_a_summary_carries_sizes_attempts_and_the_last_error(store: Store) -> None:
    await put(store, row(payload=bytes(37), max_attempts=3))
    (rec,) = await lease(store)
    await settle1(store, rec, SettleKind.RETRY, NOW + 1, delay=0, error_message="first")
    (rec,) = await lease(store, now=NOW + 2)
    await settle1(store, rec, SettleKind.RETRY, NOW + 3, delay=0, error_message="second")
    (summary,) = (await store.admin.list_jobs(JobQuery(), None, 10)).jobs
    assert (summary.payload_bytes, summary.attempts_recorded, summary.last_error) == (37, 2, "second")
    assert summary.record.payload == b"" and summary.record.attempt == 2


async def test_state_counts_per_queue_and_for_all(store: Store) -> None:
    await _mixed(store)
    a = StateCounts(scheduled=2, ready=4, cancelled=1)
    b = StateCounts(ready=2, reserved=1, completed=1, dead_lettered=1)
    assert await store.admin.state_counts("a") == {"a": a}
    assert await store.admin.state_counts(None) == {"a": a, "b": b}
    assert await store.admin.state_counts("none") == {"none": StateCounts()}
    assert (a.total, b.total) == (7, 5)


async def test_oldest_ready_is_the_smallest_run_at_of_any_priority(store: Store) -> None:
    assert await store.admin.oldest_ready("q") is None
    await put(store, row(priority=9, run_at=NOW - 1), row(priority=0, run_at=NOW - 7), row(run_at=NOW - 3))
    assert await store.admin.oldest_ready("q") == NOW - 7


def _by_minute(rows: list[MinuteRow]) -> list[MinuteRow]:
    return sorted(rows, key=lambda r: (r.queue, r.minute))


async def test_throughput_counts_add_up_and_old_minutes_are_dropped(store: Store) -> None:
    await store.admin.add_counts({("q", 10): (1, 2, 3), ("q", 11): (4, 0, 0)}, keep_after_minute=0)
    await store.admin.add_counts({("q", 10): (1, 1, 1), ("r", 12): (0, 5, 0)}, keep_after_minute=0)
    assert _by_minute(await store.admin.throughput(0)) == [
        MinuteRow("q", 10, 2, 3, 4), MinuteRow("q", 11, 4, 0, 0), MinuteRow("r", 12, 0, 5, 0)]
    assert _by_minute(await store.admin.throughput(11)) == [MinuteRow("q", 11, 4, 0, 0), MinuteRow("r", 12, 0, 5, 0)]
    await store.admin.add_counts({}, keep_after_minute=12)
    assert await store.admin.throughput(0) == [MinuteRow("r", 12, 0, 5, 0)]


async def test_cancel_in_each_state(store: Store) -> None:
    ready, sched, held, done = row(), row(state=SCHEDULED, run_at=NOW + S), row(), row()
    await put(store, held, done, ready, sched)
    h, d = await lease(store, n=2)
    await settle1(store, d, SettleKind.ACK, NOW)
    cancel = store.admin.cancel
    assert await cancel(ready.id, NOW + 1, POLICY, "") == WriteResult(Outcome.DONE, "q", int(CANCELLED))
    got = await get(store, ready.id)
    assert (got.state, got.finished_at, got.reason) == (int(CANCELLED), NOW + 1, "cancelled by admin")
    assert await cancel(sched.id, NOW + 1, POLICY, "why") == WriteResult(Outcome.DONE, "q", int(CANCELLED))
    assert (await get(store, sched.id)).reason == "why"
    assert await cancel(h.id, NOW + 1, POLICY, "") == WriteResult(Outcome.CANCEL_REQUESTED, "q", int(RESERVED))
    assert (await get(store, h.id)).cancel_requested
    assert await cancel(ready.id, NOW + 2, POLICY, "") == WriteResult(Outcome.UNCHANGED, "q", int(CANCELLED))
    assert await cancel(d.id, NOW + 2, POLICY, "") == WriteResult(Outcome.WRONG_STATE, "q", int(COMPLETED))
    assert await cancel(b"\x01" * 16, NOW, POLICY, "") == WriteResult(Outcome.NOT_FOUND)
    # A cancelled job is kept for the dead-letter retention (the completed one goes before).
    assert (await store.prune(NOW + 1 + POLICY("q").dead_retention - 1, 100)).count == 1
    assert (await store.prune(NOW + 1 + POLICY("q").dead_retention, 100)).count == 2


async def test_requeue_brings_a_dead_or_cancelled_job_back_with_its_history(store: Store) -> None:
    a, b, c = row(max_attempts=1), row(), row()
    await put(store, a, b, c)
    (rec,) = await lease(store)
    await settle1(store, rec, SettleKind.RETRY, NOW + 1, error_message="x")
    await store.admin.cancel(b.id, NOW + 1, POLICY, "")
    assert await store.admin.requeue(a.id, NOW + 5) == WriteResult(Outcome.DONE, "q", int(READY))
    back = await get(store, a.id)
    assert (back.state, back.attempt, back.run_at, back.finished_at, back.reason) == (
        int(READY), 0, NOW + 5, None, None)
    assert len(back.attempt_entries()) == 1
    assert await store.admin.requeue(b.id, NOW + 5) == WriteResult(Outcome.DONE, "q", int(READY))
    assert await store.admin.requeue(c.id, NOW + 5) == WriteResult(Outcome.WRONG_STATE, "q", int(READY))
    assert await store.admin.requeue(b"\x02" * 16, NOW) == WriteResult(Outcome.NOT_FOUND)
    # The old lease cannot settle the requeued job; it is not pruned as dead any more.
    assert (await settle1(store, rec, SettleKind.ACK, NOW + 6)).error is not None
    assert (await store.prune(NOW + 10**9 * S, 100)).count == 0
    again = {r.id: r.attempt for r in await lease(store, n=3, now=NOW + 6)}
    assert again == {a.id: 1, b.id: 1, c.id: 1}


async def test_bulk_redrive_counts_filters_and_limit(store: Store) -> None:
    rows = [row("a"), row("a"), row("b", job_type="other"), row("b")]
    await put(store, *rows)
    recs = await lease(store, "a", "b", n=4)
    for i, rec in enumerate(recs):
        await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + i, reason="BAD" if i < 3 else "GONE")
    admin = store.admin
    assert await admin.count_dead(DeadFilter()) == 4
    assert await admin.count_dead(DeadFilter(queue="a")) == 2
    assert await admin.count_dead(DeadFilter(reason_prefix="B")) == 3
    assert await admin.count_dead(DeadFilter(job_type="other")) == 1
    assert await admin.count_dead(DeadFilter(after=NOW + 1, before=NOW + 3)) == 2
    # Each requeued job is named (job id, queue, job type): the live requeued events.
    by_id = {r.id: r for r in rows}
    first = await admin.requeue_dead(DeadFilter(reason_prefix="BAD"), NOW + 9, 2)
    assert sorted(first) == sorted((r.id, "a", "t") for r in rows[:2])
    (second,) = await admin.requeue_dead(DeadFilter(reason_prefix="BAD"), NOW + 9, 2)
    assert second[1] == "b" and second[2] == by_id[second[0]].job_type
    assert await admin.requeue_dead(DeadFilter(reason_prefix="BAD"), NOW + 9, 2) == []
    assert await admin.count_dead(DeadFilter()) == 1
    assert [(await get(store, r.id)).state for r in rows] == [int(READY)] * 3 + [int(DEAD)]
    (last,) = await admin.requeue_dead(DeadFilter(queue="b"), NOW + 9, 10)
    assert last[1] == "b" and last[0] not in {second[0], *(job_id for job_id, _q, _t in first)}


async def test_a_delete_in_a_state_leaves_a_job_that_left_it_alone(store: Store) -> None:
    # What a ticked row asks: delete only while the job is still in the listed state.
    rows = [row(), row(), row(state=SCHEDULED, run_at=NOW + S)]
    await put(store, *rows, new_queues=[QueueRecord("q", "{}", False, False)])
    (held,) = await lease(store)
    admin = store.admin
    assert await admin.delete_job(held.id, int(DEAD)) == WriteResult(Outcome.WRONG_STATE, "q", int(RESERVED))
    assert (await get(store, held.id)).state == int(RESERVED)
    assert await admin.delete_job(rows[2].id, int(READY)) == WriteResult(Outcome.WRONG_STATE, "q", int(SCHEDULED))
    assert await admin.delete_job(rows[2].id, int(SCHEDULED)) == WriteResult(Outcome.DONE, "q", int(SCHEDULED))
    assert await admin.delete_job(rows[2].id, int(SCHEDULED)) == WriteResult(Outcome.NOT_FOUND)
    assert await admin.delete_job(held.id, int(RESERVED)) == WriteResult(Outcome.DONE, "q", int(RESERVED))


async def test_delete_purge_and_delete_queue(store: Store) -> None:
    rows = [row(), row(), row(), row(state=SCHEDULED, run_at=NOW + S), row("other")]
    await put(store, *rows, new_queues=[QueueRecord("q", "{}", False, False), QueueRecord("other", "{}", False, False)])
    (held,) = await lease(store)
    await store.admin.add_counts({("q", 1): (1, 0, 0)}, keep_after_minute=0)
    admin = store.admin
    assert await admin.delete_job(rows[1].id) == WriteResult(Outcome.DONE, "q", int(READY))
    assert await admin.delete_job(rows[1].id) == WriteResult(Outcome.NOT_FOUND)
    assert await admin.delete_queue("q") is False
    assert await admin.purge("q", [int(SCHEDULED), int(READY), int(RESERVED)], 2) == 2
    assert await admin.purge("q", [int(SCHEDULED), int(READY), int(RESERVED)], 2) == 1
    assert await admin.purge("q", [int(COMPLETED)], 10) == 0
    assert await store.get_job(held.id) is None  # RESERVED jobs are purged too
    assert (await get(store, rows[4].id)).state == READY  # other queues untouched
    assert await admin.delete_queue("q") is True
    assert [q.name for q in await store.load_queues()] == ["other"]
    assert await admin.throughput(0) == []
    assert (await settle1(store, held, SettleKind.ACK, NOW + 1)).error is not None
    assert LEASE > 0


@pytest.mark.parametrize("state", [None, int(READY), int(DEAD)])
async def test_paging_while_other_jobs_change_lists_each_unchanged_job_once(store: Store,
                                                                             state: int | None) -> None:
    # SPEC §6: a job that does not change state while a listing is paged appears exactly once.
    rows = [row() for _ in range(6)]
    await put(store, *rows)
    if state == int(DEAD):
        for i, rec in enumerate(await lease(store, n=6)):
            await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + i, reason="R")
    query = JobQuery(state=state)
    first = await store.admin.list_jobs(query, None, 2)
    seen = [s.record.id for s in first.jobs]
    # Between pages: one unseen job changes state, new jobs arrive, one seen job is deleted.
    unseen = [r.id for r in rows if r.id not in seen]
    changed = unseen[0]
    if state == int(DEAD):
        await store.admin.requeue(changed, NOW + 10)
    else:
        await store.admin.cancel(changed, NOW + 10, POLICY, "")
    await store.admin.delete_job(seen[0])
    await put(store, row(), row(), now=NOW + 11)
    after = first.next_key
    while after is not None:
        page = await store.admin.list_jobs(query, after, 2)
        seen += [s.record.id for s in page.jobs]
        after = page.next_key
    stable = [i for i in unseen if i != changed]
    assert all(seen.count(i) == 1 for i in stable + seen[:2])
    assert len(seen) == len(set(seen))


async def test_a_batch_of_hundreds_of_keyed_rows_and_acks_in_one_call(store: Store) -> None:
    rows = [row(key=f"k{i % 500}") for i in range(600)]  # the last 100 repeat the first keys
    dedups = await put(store, *rows)
    assert dedups == {i: (rows[i - 500].id, int(READY)) for i in range(500, 600)}
    recs = await lease(store, n=600)
    assert len(recs) == 500
    results = await store.settle([SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + 1) for r in recs],
                                 POLICY)
    assert [r.state for r in results] == [int(COMPLETED)] * 500
    assert (await store.admin.state_counts("q"))["q"] == StateCounts(completed=500)


@pytest.mark.parametrize("limit", [1, 2, 100])
async def test_the_retries_listing_holds_only_scheduled_retries_in_run_order(store: Store, limit: int) -> None:
    first_runs = [row("a", state=SCHEDULED, run_at=NOW + t * S) for t in (1, 50)]
    failing = [row("a"), row("b"), row("a")]
    await put(store, *first_runs, *failing)
    recs = await lease(store, "a", "b", n=3)
    assert {r.id for r in recs} == {r.id for r in failing}
    delays = {failing[0].id: 30 * S, failing[1].id: 10 * S, failing[2].id: 20 * S}
    for rec in recs:
        await settle1(store, rec, SettleKind.RETRY, NOW + 1, delay=delays[rec.id], error_message="503")
    retries = JobQuery(state=int(SCHEDULED), retries=True)
    # Next to run first; the jobs scheduled for their first run are left out.
    assert [i for p in await _walk(store, retries, limit) for i in p] == [failing[1].id, failing[2].id,
                                                                         failing[0].id]
    assert [i for p in await _walk(store, JobQuery(state=int(SCHEDULED), queue="a", retries=True), limit)
            for i in p] == [failing[2].id, failing[0].id]
    every = [i for p in await _walk(store, JobQuery(state=int(SCHEDULED)), limit) for i in p]
    assert sorted(every) == sorted([*(r.id for r in first_runs), *(r.id for r in failing)])
    # A retry that runs again is no longer waiting: gone from the listing.
    await store.admin.cancel(failing[1].id, NOW + 2, POLICY, "operator")
    assert [i for p in await _walk(store, retries, limit) for i in p] == [failing[2].id, failing[0].id]
