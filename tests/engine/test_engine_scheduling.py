"""Scheduled jobs through the real engine and sweeper with a fake clock (SPEC §3, §6): stored
SCHEDULED with run_at = scheduled_at, the sweeper hinted, promoted by the pass at exactly
run_at (or by a reserve), and a long-polling reserve woken by the promotion.
"""

from __future__ import annotations

import asyncio

from engine.engine_kit import Harness, S
from sepp.domain.states import State


async def test_a_scheduled_job_is_promoted_when_the_clock_reaches_run_at(harness: Harness) -> None:
    h = harness
    run_at = h.now + 30 * S + 250_000
    job_id, _ = await h.enqueue(at_us=run_at)
    rec = await h.job(job_id)
    assert (rec.state, rec.run_at, rec.enqueued_at) == (int(State.SCHEDULED), run_at, h.now)
    assert h.sweeper._next_due == run_at  # the engine hinted the sweeper
    assert await h.store.next_due() == run_at
    h.clock.set(run_at - 1)
    assert (await h.sweeper.run_once())["promote"].count == 0
    assert await h.reserve() == []
    h.clock.set(run_at)
    promote = (await h.sweeper.run_once())["promote"]
    assert (promote.count, promote.queues) == (1, frozenset({"q"}))
    assert (await h.job(job_id)).state == State.READY
    assert await h.store.next_due() is None
    (job,) = await h.reserve()
    assert job.id == job_id


async def test_a_scheduled_time_in_the_past_is_ready_at_once(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue(at_us=h.now - 5 * S)
    rec = await h.job(job_id)
    assert (rec.state, rec.run_at) == (int(State.READY), h.now)  # run_at = max(scheduled_at, now)


async def test_a_reserve_past_run_at_promotes_by_itself(harness: Harness) -> None:
    h = harness
    later, _ = await h.enqueue(at_us=h.now + 20 * S)
    sooner, _ = await h.enqueue(at_us=h.now + 10 * S)
    h.clock.advance(20)
    jobs = await h.reserve(n=5)
    assert [j.id for j in jobs] == [sooner, later]  # run_at order


async def test_a_long_polling_reserve_wakes_when_the_promotion_makes_its_job_ready(harness: Harness) -> None:
    h = harness
    run_at = h.now + 60 * S
    job_id, _ = await h.enqueue(at_us=run_at)
    # Waits (in real time, up to 10 s) for a job; the fake clock is moved and one pass run.
    waiting = asyncio.create_task(h.engine.reserve(["q"], 1, None, 10.0, "w"))
    for _ in range(3):
        await asyncio.sleep(0)
    # Once the store has run what was submitted, the reserve's first attempt (taken at the
    # old time) found nothing and it waits.
    await h.writes_done()
    assert not waiting.done()
    h.clock.set(run_at)
    assert (await h.sweeper.run_once())["promote"].count == 1
    (job,) = await asyncio.wait_for(waiting, 5.0)
    assert (job.id, job.started_at) == (job_id, run_at)
