"""What ``JobEngine.reserve`` notes of its caller for the Workers page (issue 13), on the real
engine and store with the fake clock: a worker is listed as soon as its Reserve is accepted —
one idle in its first long poll too (a new user's ``sepp workers list`` said "No worker called
within the last hour" for two workers parked in their first 30 s poll) — and its last Reserve
moves on when the call ends; a refused call is not noted."""

from __future__ import annotations

import asyncio

import pytest
from support.worker import until

from engine.engine_kit import Harness, S
from sepp.server.errors import InvalidRequest


async def test_a_worker_parked_in_its_first_long_poll_is_listed_at_once(harness: Harness) -> None:
    h = harness
    t0 = h.clock.now()
    call = asyncio.create_task(h.engine.reserve(["q"], 5, 60.0, 30.0, "W", host="host-a", concurrency=4,
                                                client_version="sepp-python/9"))
    await until(lambda: h.engine.parked("W") == 1, what="the reserve to park")
    (rec,) = h.engine.workers.snapshot("n1")
    assert (rec.worker_id, rec.host, rec.queues, rec.concurrency, rec.client_version) == \
        ("W", "host-a", ("q",), 4, "sepp-python/9")
    assert rec.first_seen == rec.last_reserve == rec.last_seen == t0
    h.clock.advance(20)                      # 20 s into its long poll
    assert h.engine.stop_reserving("W") == 1
    assert await asyncio.wait_for(call, 5.0) == []
    (rec,) = h.engine.workers.snapshot("n1")
    assert rec.first_seen == t0 and rec.last_reserve == rec.last_seen == t0 + 20 * S  # noted again at its end


async def test_a_refused_reserve_notes_nobody(harness: Harness) -> None:
    h = harness
    with pytest.raises(InvalidRequest):
        await h.engine.reserve(["q"], 0, None, 0.0, "bad", host="h")  # max_jobs 0
    with pytest.raises(InvalidRequest):
        await h.engine.reserve([], 1, None, 0.0, "bad", host="h")     # no queue
    assert await h.engine.reserve(["q"], 1, None, 0.0, "") == []     # no id: answered, not listed
    assert h.engine.workers.snapshot("n1") == []
