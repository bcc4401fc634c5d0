"""A Reserve of one queue promotes the due jobs of EVERY queue (promote_due has no
queue filter). Other nodes hear of it (NOTIFY); this node ignores its own, and its sweep's
pass at the due time then found nothing left to promote, so woke nobody: a long poll of the
promoted queue on this node waited out its whole wait (up to 30 s) with a READY job there.
Both backends; fails before ``Store.on_promoted``."""

from __future__ import annotations

import asyncio

from support.worker import until

from engine.engine_kit import Harness, S


async def test_a_long_poll_wakes_when_another_queues_reserve_promoted_its_job(harness: Harness) -> None:
    await harness.enqueue("y")
    assert len(await harness.engine.reserve(["y"], 1, None, 0.0, "wy")) == 1  # queue y known
    poll = asyncio.create_task(harness.engine.reserve(["x"], 1, None, 10.0, "wx"))
    await until(lambda: harness.engine.parked("wx") == 1, what="the long poll to park")
    await harness.enqueue("x", at_us=harness.now + S)
    await asyncio.sleep(0.05)  # a check that nothing happens: a job due later wakes no one now
    assert not poll.done()
    harness.clock.advance(2)
    assert await harness.engine.reserve(["y"], 1, None, 0.0, "wy") == []  # promotes x's job as a side effect
    assert await harness.sweeper.promote_once() == 0  # the due-time pass: nothing left to promote
    started = asyncio.get_running_loop().time()
    got = await asyncio.wait_for(poll, 15)
    took = asyncio.get_running_loop().time() - started
    assert len(got) == 1 and took < 5.0, (got, took)  # woken, not at the end of its 10 s wait
