"""Waiting for jobs in-process on each backend (``JobEngine.wait_jobs``): a finished job is
answered at once with its outcome; a parked wait is answered when the job is acked,
dead-lettered (by a nack or by its lease running out), cancelled or deleted; no wake-up is
lost between the wait's read and its park; an unknown id is NOT_FOUND naming it; 1,000 ids
are taken and 1,001 refused; 100 waits on one job all answer; a wait times out empty."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest
from support.worker import until

from engine.engine_kit import Harness, HarnessFactory, S, request
from sepp.api.v1 import producer_pb2 as ppb
from sepp.domain.ids import job_id_text
from sepp.domain.outcomes import JobOutcome
from sepp.domain.states import State
from sepp.server import waiting
from sepp.server.admin import AdminEngine
from sepp.server.errors import InvalidRequest, NotFound

COMPLETED, DEAD, CANCELLED = int(State.COMPLETED), int(State.DEAD_LETTERED), int(State.CANCELLED)


async def _parked_wait(h: Harness, ids: Sequence[bytes], wait_s: float = 30.0, count: int = 1
                       ) -> asyncio.Task[list[JobOutcome]]:
    """A ``wait_jobs`` task for ``ids`` (``wait_s`` seconds), once it is parked (``count``
    parked waits in all)."""
    task = asyncio.create_task(h.engine.wait_jobs([job_id_text(i) for i in ids], wait_s))
    await until(lambda: h.engine.waits_parked() >= count or task.done(), what="the wait to park")
    assert not task.done(), task.result()
    return task


async def test_a_finished_job_is_answered_at_once_with_its_outcome(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue()
    (job,) = await h.reserve()
    await h.nack(job, retry_after_s=0, message="first try failed")
    h.clock.advance(1)
    (job,) = await h.reserve()
    await h.ack(job)
    (got,) = await h.engine.wait_jobs([job_id_text(job_id)], 0.0)
    assert (got.id, got.state, got.attempt, got.queue, got.job_type) == (job_id, COMPLETED, 2, "q", "t")
    assert got.finished_at == h.now and got.result is None and got.result_encoding is None
    assert [(e["attempt"], e["outcome"]) for e in got.attempt_entries()] == [(1, "retry_after"), (2, "completed")]
    assert got.last_error() == "first try failed"


async def test_an_unfinished_job_times_out_empty(harness: Harness) -> None:
    job_id, _ = await harness.enqueue()
    assert await harness.engine.wait_jobs([job_id_text(job_id)], 0.0) == []
    started = asyncio.get_running_loop().time()
    assert await harness.engine.wait_jobs([job_id_text(job_id)], 0.2) == []
    assert asyncio.get_running_loop().time() - started >= 0.19


async def test_a_parked_wait_is_answered_when_the_job_is_acked(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue()
    other, _ = await h.enqueue()
    (job,) = await h.reserve()
    assert job.id == job_id
    wait = await _parked_wait(h, [other, job_id])
    await h.ack(job)
    (got,) = await asyncio.wait_for(wait, 5)
    assert (got.id, got.state) == (job_id, COMPLETED)
    assert h.engine.waits_parked() == 0


async def test_a_job_acked_between_the_waits_read_and_its_park_is_answered_at_once(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ack commits (and announces itself) while the wait's read is in flight and the read
    returns the job unfinished: the wait registered before reading, so the wake-up is not
    lost and it reads again at once instead of parking for its whole timeout."""
    h = harness
    job_id, _ = await h.enqueue()
    (job,) = await h.reserve()
    read = h.store.job_outcomes
    reads = 0
    loop = asyncio.get_running_loop()
    acked_at = 0.0

    async def read_then_ack(ids: Sequence[bytes]) -> list[JobOutcome]:
        nonlocal reads, acked_at
        reads += 1
        rows = await read(ids)
        if reads == 1:
            assert [r.state for r in rows] == [int(State.RESERVED)]
            await h.ack(job)  # finishes after the read, before the wait parks
            acked_at = loop.time()
        return rows

    monkeypatch.setattr(h.store, "job_outcomes", read_then_ack)
    # No re-read on a timer could answer it either (a shared store's): only the wake-up can.
    monkeypatch.setattr(waiting, "FIRST_RECHECK", 60.0)
    (got,) = await asyncio.wait_for(h.engine.wait_jobs([job_id_text(job_id)], 30.0), 10)
    assert got.state == COMPLETED and reads == 2
    assert loop.time() - acked_at < 5  # at once (a loaded machine's read), not after the 30 s timeout


async def test_an_unknown_id_is_not_found_naming_it(harness: Harness) -> None:
    known, _ = await harness.enqueue()
    unknown = "0190f1c2-0000-7000-8000-000000000001"
    with pytest.raises(NotFound) as caught:
        await harness.engine.wait_jobs([job_id_text(known), unknown], 5.0)
    assert caught.value.reason == "JOB_NOT_FOUND" and caught.value.metadata == {"job_id": unknown}
    assert unknown in str(caught.value)
    with pytest.raises(InvalidRequest) as bad:
        await harness.engine.wait_jobs(["not-a-uuid"], 1.0)
    assert bad.value.field == "job_ids[0]"


async def test_a_job_deleted_while_waited_for_is_not_found(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    job_id, _ = await h.enqueue()
    wait = await _parked_wait(h, [job_id])
    await admin.jobs.delete_job(job_id_text(job_id))
    with pytest.raises(NotFound):
        await asyncio.wait_for(wait, 5)


async def test_1000_ids_are_waited_for_and_1001_are_refused(harness: Harness) -> None:
    h = harness
    ids: list[str] = []
    for start in range(0, 1001, 250):
        batch = [request() for _ in range(min(250, 1001 - start))]
        ids += [r[0] for r in await h.engine.enqueue_batch(batch) if isinstance(r, tuple)]
    with pytest.raises(InvalidRequest) as refused:
        await h.engine.wait_jobs(ids, 1.0)
    assert (refused.value.field, refused.value.limit, refused.value.actual) == ("job_ids", 1000, 1001)
    with pytest.raises(InvalidRequest):
        await h.engine.wait_jobs([], 1.0)
    wait = asyncio.create_task(h.engine.wait_jobs(ids[:1000], 30.0))
    await until(lambda: h.engine.waits_parked() == 1, what="the wait to park")
    (job,) = await h.reserve()  # the first enqueued
    await h.ack(job)
    (got,) = await asyncio.wait_for(wait, 5)
    assert job_id_text(got.id) == ids[0]


async def test_a_dead_lettered_job_is_answered_with_its_error_and_reason(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue()
    (job,) = await h.reserve()
    wait = await _parked_wait(h, [job_id])
    await h.nack(job, dead_letter="bad input", message="ValueError: no")
    (got,) = await asyncio.wait_for(wait, 5)
    assert got.state == DEAD and got.last_error() == "ValueError: no"
    assert got.reason is not None and got.reason.startswith("NACK_DEAD_LETTER")
    assert [e["outcome"] for e in got.attempt_entries()] == ["dead_letter"]


async def test_a_lease_running_out_on_the_last_attempt_answers_the_wait(harness: Harness) -> None:
    h = harness
    ack = await h.engine.enqueue(request(max_attempts=1))
    (job,) = await h.reserve(lease_s=5)
    wait = await _parked_wait(h, [job.id])
    h.clock.advance(6)
    await h.sweeper.run_once()
    (got,) = await asyncio.wait_for(wait, 5)
    assert (job_id_text(got.id), got.state) == (ack.job_id, DEAD)
    assert got.reason is not None and got.reason.startswith("LEASE_EXPIRED")


async def test_an_admin_cancel_answers_the_wait(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    job_id, _ = await h.enqueue()
    wait = await _parked_wait(h, [job_id])
    await admin.jobs.cancel(job_id_text(job_id), "not needed")
    (got,) = await asyncio.wait_for(wait, 5)
    assert (got.state, got.reason) == (CANCELLED, "not needed")


async def test_100_waits_on_one_job_are_all_answered(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue()
    (job,) = await h.reserve()
    waits = [asyncio.create_task(h.engine.wait_jobs([job_id_text(job_id)], 30.0)) for _ in range(100)]
    await until(lambda: h.engine.waits_parked() == 100, what="100 waits to park")
    await h.ack(job)
    answers = await asyncio.wait_for(asyncio.gather(*waits), 10)
    assert [[(o.id, o.state) for o in a] for a in answers] == [[(job_id, COMPLETED)]] * 100
    assert h.engine.waits_parked() == 0 and not h.engine.waits._by_id


async def test_a_wait_longer_than_max_wait_answers_empty_at_max_wait(make_harness: HarnessFactory) -> None:
    h = await make_harness(limits={"max_wait_seconds": 1.0})
    job_id, _ = await h.enqueue()
    started = asyncio.get_running_loop().time()
    assert await asyncio.wait_for(h.engine.wait_jobs([job_id_text(job_id)], 3600.0), 10) == []
    assert 0.95 <= asyncio.get_running_loop().time() - started < 5


async def test_the_servers_stop_ends_parked_waits_empty(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue()
    wait = await _parked_wait(h, [job_id])
    assert h.engine.end_waits() == 1
    assert await asyncio.wait_for(wait, 5) == []
    assert await h.engine.wait_jobs([job_id_text(job_id)], 30.0) == []  # a later one does not park


async def test_the_answer_holds_the_finished_jobs_in_request_order(harness: Harness) -> None:
    h = harness
    first, _ = await h.enqueue()
    second, _ = await h.enqueue()
    for job in await h.reserve(n=2):
        await h.ack(job)
    got = await h.engine.wait_jobs([job_id_text(second), job_id_text(first)], 0.0)
    assert [o.id for o in got] == [second, first]
    # an id given twice counts once
    assert [o.id for o in await h.engine.wait_jobs([job_id_text(first)] * 2, 0.0)] == [first]


def test_the_wire_answer_carries_the_outcome() -> None:
    from sepp.server.rpc.outcomes import wait_response

    history = json.dumps([{"attempt": 1, "worker_id": "w", "node": "n1", "started_at": S, "ended_at": 2 * S,
                           "outcome": "dead_letter", "error_message": "boom", "error_detail": "trace"}])
    o = JobOutcome(b"\x01" * 16, "q", "t", DEAD, 1, 2 * S, "NACK_DEAD_LETTER: no", history, "w", "n1", S,
                   b'{"a":1}', "application/json")
    (msg,) = wait_response([o]).outcomes
    assert isinstance(msg, ppb.JobOutcome)
    assert (msg.state, msg.attempt, msg.last_error, msg.reason, msg.queue, msg.job_type) == (
        DEAD, 1, "boom", "NACK_DEAD_LETTER: no", "q", "t")
    assert (msg.result.data, msg.result.encoding) == (b'{"a":1}', "application/json")
    assert msg.finished_at.ToMicroseconds() == 2 * S
    assert [(a.attempt, a.outcome, a.error_detail, a.node) for a in msg.attempts] == [(1, "dead_letter", "trace", "n1")]
    assert not wait_response([o._replace(result=None)]).outcomes[0].HasField("result")
