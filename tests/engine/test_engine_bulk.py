"""Bulk actions in-process on each backend: the dry-run count, a selection
(each job through the admin engine's own operation; a job in the wrong state skipped and
counted), a run over every matching job in small chunks with progress, bounded by the
confirmed count, and the finished-state snapshot (a requeued job that dead-letters again
during the run is not requeued twice)."""

from __future__ import annotations

import pytest

from engine.engine_kit import Harness, request
from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.domain.states import State
from sepp.server.admin import AdminEngine
from sepp.server.admin.bulk import MAX_SELECTED, BulkActions
from sepp.server.errors import InvalidRequest, NotFound
from sepp.storage.admin import JobQuery

READY, DEAD, CANCELLED = int(State.READY), int(State.DEAD_LETTERED), int(State.CANCELLED)


async def _dead(h: Harness, n: int, job_type: str = "t") -> list[str]:
    """``n`` dead-lettered jobs of ``job_type`` in queue q (one second apart)."""
    ids = []
    for _ in range(n):
        ack = await h.engine.enqueue(request(job_type=job_type))
        (job,) = await h.reserve()
        await h.nack(job, dead_letter="NOPE")
        h.clock.advance(us=1_000_000)
        ids.append(ack.job_id)
    return ids


async def _states(h: Harness, ids: list[str]) -> list[int]:
    """The state of each job (0 for one that is gone)."""
    recs = [await h.store.get_job(job_id_bytes(i) or b"") for i in ids]
    return [0 if r is None else r.state for r in recs]


async def test_the_dry_run_counts_one_state_and_type_and_changes_nothing(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    ids = await _dead(h, 3, "a") + await _dead(h, 2, "b")
    bulk = admin.bulk
    assert (await bulk.count("requeue", JobQuery(queue="q", state=DEAD)))[1] == 5
    assert (await bulk.count("requeue", JobQuery(queue="q", state=DEAD, job_type="b")))[1] == 2
    assert (await bulk.count("delete", JobQuery(queue="q", state=READY)))[1] == 0
    assert await _states(h, ids) == [DEAD] * 5
    with pytest.raises(InvalidRequest):
        await bulk.count("requeue", JobQuery(queue="q", state=READY))   # READY jobs cannot be requeued
    with pytest.raises(InvalidRequest):
        await bulk.count("explode", JobQuery(queue="q", state=DEAD))
    with pytest.raises(NotFound):
        await bulk.count("delete", JobQuery(queue="nope", state=DEAD))


async def test_a_selection_goes_through_the_single_job_operations(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    dead = await _dead(h, 3)
    ready = (await h.engine.enqueue(request())).job_id
    outcome = await admin.bulk.apply("requeue", DEAD, [*dead, ready, dead[0], "not-a-uuid"])
    assert outcome.done == 3 and dict(outcome.skipped) == {"were READY": 1, "not a job id": 1}
    assert await _states(h, dead) == [READY] * 3
    rec = await admin.get_job(dead[0])
    assert rec.attempt == 0 and rec.attempt_entries()        # a redrive: attempt reset, history kept
    outcome = await admin.bulk.apply("cancel", READY, [*dead, ready])
    assert outcome.done == 4 and await _states(h, [*dead, ready]) == [CANCELLED] * 4
    outcome = await admin.bulk.apply("delete", CANCELLED, dead)
    assert outcome.done == 3 and not outcome.skipped
    assert (await admin.bulk.apply("delete", CANCELLED, dead)).skipped == {"gone": 3}
    with pytest.raises(InvalidRequest):
        await admin.bulk.apply("delete", CANCELLED, [f"id-{i}" for i in range(MAX_SELECTED + 1)])
    assert (await admin.bulk.apply("delete", CANCELLED, [ready] * (MAX_SELECTED + 1))).done == 1  # repeats count once


async def test_a_run_walks_every_match_in_chunks_up_to_the_confirmed_count(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    bulk = BulkActions(admin.jobs, chunk=3, concurrency=2)
    ids = await _dead(h, 10)
    others = await _dead(h, 2, "other")
    run = await bulk.start("requeue", JobQuery(queue="q", state=DEAD, job_type="t"), confirmed=10)
    assert run.expected == 10 and run.query.finished_before is not None     # the finished-state snapshot
    await bulk.wait(run.id)
    assert run.finished and run.error is None and (run.seen, run.outcome.done) == (10, 10)
    assert await _states(h, ids) == [READY] * 10 and await _states(h, others) == [DEAD] * 2
    assert bulk.run(run.id) is run and bulk.running() == 0
    # A run over an unfinished state (no snapshot): delete the ten READY again.
    run = await bulk.start("delete", JobQuery(queue="q", state=READY), confirmed=100)
    await bulk.wait(run.id)
    assert (run.expected, run.outcome.done) == (10, 10)
    # At most the confirmed count, even when more match by now.
    more = await _dead(h, 5)
    run = await bulk.start("delete", JobQuery(queue="q", state=DEAD, job_type="t"), confirmed=3)
    await bulk.wait(run.id)
    assert (run.expected, run.outcome.done) == (3, 3)
    assert await _states(h, more) == [DEAD, DEAD, 0, 0, 0]            # newest first: the two oldest stay


async def test_a_run_does_not_take_a_job_twice_when_it_dead_letters_again(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    bulk = BulkActions(admin.jobs, chunk=1, concurrency=1)
    ids = await _dead(h, 4)
    query, matched = await bulk.count("requeue", JobQuery(queue="q", state=DEAD))
    assert matched == 4
    # The first requeued job fails again at once, after the snapshot: newest first, so the
    # walk would meet it again without the finished_before bound.
    await admin.requeue(ids[0])
    h.clock.advance(us=1_000_000)
    (job,) = await h.reserve()
    await h.nack(job, dead_letter="AGAIN")
    run = await bulk.start("requeue", query, confirmed=4)               # the dry run's snapshot
    await bulk.wait(run.id)
    assert run.outcome.done == 3 and run.seen == 3                       # ids[1:]; not ids[0] again
    assert (await _states(h, ids)) == [DEAD, READY, READY, READY]
    assert job_id_text(job.id) == ids[0] and query.state == DEAD


async def test_a_cancel_that_finds_its_job_running_counts_as_requested_not_cancelled(harness: Harness) -> None:
    """Found by attacking (attack notes F2): a bulk cancel of every READY job while workers
    reserve counted each job a worker had just taken as "cancelled" — on PostgreSQL 46,935
    "cancelled" of 50,000 while only 26,100 ended CANCELLED (the workers completed the rest).
    A job the cancel finds RESERVED is counted apart, as "running: cancel requested"."""
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    ids = [(await h.engine.enqueue(request())).job_id for _ in range(5)]
    taken = await h.reserve(n=2)  # listed READY, reserved by a worker before the cancel reaches them
    outcome = await admin.bulk.apply("cancel", READY, ids)
    assert (outcome.done, outcome.requested, dict(outcome.skipped)) == (3, 2, {})
    assert outcome.requested_text() == "2 running: cancel requested"
    running = {job_id_text(j.id) for j in taken}
    assert await _states(h, [i for i in ids if i not in running]) == [CANCELLED] * 3
    for job in taken:
        await h.ack(job)  # the worker may still complete a job whose cancel was requested
    assert await _states(h, list(running)) == [int(State.COMPLETED)] * 2
