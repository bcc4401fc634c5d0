"""Reserve order and queue settings through the real engine with a fake clock (SPEC §3, §6):
promoted jobs take their place by scheduled time, a back-dated job does not jump ahead, a
scheduled batch keeps its order, the queue's default priority applies, a paused queue gives
nothing until resumed (which wakes a long poll), and changed settings apply at once. The
process-level versions (tests/integration/test_ordering.py) wait in real time.
"""

from __future__ import annotations

import asyncio

from engine.engine_kit import Harness, HarnessFactory, S, request
from sepp.domain.ids import job_id_bytes
from sepp.domain.states import State
from sepp.server.admin import AdminEngine


async def test_promoted_jobs_take_their_place_by_scheduled_time(harness: Harness) -> None:
    h = harness
    t0 = h.now
    ready_now, _ = await h.enqueue()                                   # run_at t0
    late, _ = await h.enqueue(at_us=t0 + 450_000)
    early, _ = await h.enqueue(at_us=t0 + 300_000)                     # enqueued after `late`
    high, _ = await h.enqueue(at_us=t0 + 400_000, priority=9)
    h.clock.set(t0 + 600_000)
    await h.sweeper.run_once()
    ready_later, _ = await h.enqueue()                                 # run_at t0 + 0.6 s
    jobs = await h.reserve(n=10)
    assert [j.id for j in jobs] == [high, ready_now, early, late, ready_later]
    assert [j.run_at for j in jobs] == [t0 + 400_000, t0, t0 + 300_000, t0 + 450_000, t0 + 600_000]


async def test_a_back_dated_job_does_not_jump_ahead_of_waiting_jobs(harness: Harness) -> None:
    h = harness
    first, _ = await h.enqueue()
    h.clock.advance(us=1)
    second, _ = await h.enqueue(at_us=h.now - 3600 * S)
    h.clock.advance(us=1)
    third, _ = await h.enqueue()
    jobs = await h.reserve(n=3)
    assert [j.id for j in jobs] == [first, second, third]
    assert jobs[1].run_at == jobs[1].enqueued_at == jobs[0].run_at + 1  # run_at = max(scheduled_at, now)


async def test_a_scheduled_batch_keeps_its_order(harness: Harness) -> None:
    h = harness
    due = h.now + 300_000
    acks = await h.engine.enqueue_batch([request(at_us=due, job_type=f"j{i}") for i in range(20)])
    ids = [job_id_bytes(ack[0]) for ack in acks if isinstance(ack, tuple)]
    assert len(ids) == 20
    h.clock.set(due)
    jobs = await h.reserve(n=20)
    assert [j.id for j in jobs] == ids
    assert [j.job_type for j in jobs] == [f"j{i}" for i in range(20)]


async def test_the_queues_default_priority_applies_when_none_is_given(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"default_priority": 7}})
    plain, _ = await h.enqueue()
    low, _ = await h.enqueue(priority=2)
    top, _ = await h.enqueue(priority=9)
    assert (await h.job(plain)).priority == 7
    assert [j.id for j in await h.reserve(n=3)] == [top, plain, low]


async def test_a_paused_queue_gives_nothing_and_resuming_wakes_a_long_poll(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    a, _ = await h.enqueue("a")
    b, _ = await h.enqueue("b")
    await admin.set_paused("a", True)
    assert await h.reserve("a") == []
    # A paused queue is skipped; the next one in the list answers.
    assert [j.id for j in await h.engine.reserve(["a", "b"], 2, None, 0.0, "w")] == [b]
    waiting = asyncio.create_task(h.engine.reserve(["a"], 1, None, 10.0, "w"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    await admin.set_paused("a", False)
    (job,) = await asyncio.wait_for(waiting, 5.0)  # woken at once, not after the 10 s wait
    assert job.id == a
    assert (await h.job(a)).state == State.RESERVED


async def test_changed_queue_settings_apply_to_the_next_retry(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"retry_base": 1.0, "retry_jitter": 0.0}})
    admin = AdminEngine(h.parts, h.store.admin)
    await h.enqueue(max_attempts=5)
    (job,) = await h.reserve()
    assert (await h.nack(job)).run_at == h.now + 1 * S
    await admin.update_queue("q", {"retry_base": 5.0}, ["retry_base"])
    h.clock.advance(1)
    (job,) = await h.reserve()
    assert (await h.nack(job)).run_at == h.now + 10 * S  # 5 s × 2^(2−1)
