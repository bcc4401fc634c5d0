"""What ``JobEngine.reserve`` notes of its caller for the Workers page, on the real
engine and store with the fake clock: a worker is listed as soon as its Reserve is accepted —
one idle in its first long poll too (a new user's ``sepp workers list`` said "No worker called
within the last hour" for two workers parked in their first 30 s poll) — and its last Reserve
moves on when the call ends; a refused call is not noted; a clean stop (``StopReserving`` with
``stopped``) lists it stopped until its next Reserve, on every node of a cluster."""

from __future__ import annotations

import asyncio

import pytest
from support.backends import fresh_schema
from support.worker import until

from engine.engine_kit import Harness, HarnessFactory, S
from sepp.server.admin import AdminEngine
from sepp.server.errors import InvalidRequest
from sepp.storage.config import PostgresSettings


async def test_a_worker_parked_in_its_first_long_poll_is_listed_at_once(harness: Harness) -> None:
    h = harness
    t0 = h.clock.now()
    call = asyncio.create_task(h.engine.reserve(["q"], 5, 60.0, 30.0, "W", host="host-a", concurrency=4,
                                                client_version="sepp-python/9"))
    await until(lambda: h.engine.parked("W") == 1, what="the reserve to park")
    (rec,) = h.parts.workers.snapshot("n1")
    assert (rec.worker_id, rec.host, rec.queues, rec.concurrency, rec.client_version) == \
        ("W", "host-a", ("q",), 4, "sepp-python/9")
    assert rec.first_seen == rec.last_reserve == rec.last_seen == t0
    h.clock.advance(20)                      # 20 s into its long poll
    assert h.engine.stop_reserving("W") == 1
    assert await asyncio.wait_for(call, 5.0) == []
    (rec,) = h.parts.workers.snapshot("n1")
    assert rec.first_seen == t0 and rec.last_reserve == rec.last_seen == t0 + 20 * S  # noted again at its end


async def test_a_refused_reserve_notes_nobody(harness: Harness) -> None:
    h = harness
    with pytest.raises(InvalidRequest):
        await h.engine.reserve(["q"], 0, None, 0.0, "bad", host="h")  # max_jobs 0
    with pytest.raises(InvalidRequest):
        await h.engine.reserve([], 1, None, 0.0, "bad", host="h")     # no queue
    assert await h.engine.reserve(["q"], 1, None, 0.0, "") == []     # no id: answered, not listed
    assert h.parts.workers.snapshot("n1") == []


async def test_a_clean_stop_lists_the_worker_stopped_until_its_next_reserve(harness: Harness) -> None:
    """``StopReserving`` with ``stopped`` (a Worker's last call) on the real engine and store:
    ListWorkers' view says stopped at once (not live for two lease periods); the end of the long
    poll it woke does not undo it; the restarted worker's first Reserve is live again."""
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    call = asyncio.create_task(h.engine.reserve(["q"], 5, 60.0, 30.0, "W", host="host-a", concurrency=4))
    await until(lambda: h.engine.parked("W") == 1, what="the reserve to park")
    h.clock.advance(3)
    assert h.engine.stop_reserving("W") == 1      # the stop's first call: still running
    assert [v.state for v in await admin.workers()] == ["live"]
    assert await asyncio.wait_for(call, 5.0) == []
    h.clock.advance(1)
    assert h.engine.stop_reserving("W", stopped=True) == 0  # its last one
    (view,) = await admin.workers()
    assert (view.state, view.stopped_at, view.quiet, view.host) == ("stopped", h.now, False, "host-a")
    h.clock.advance(3600 - 1)                     # stays stopped, never quiet, until forgotten
    assert [v.state for v in await admin.workers()] == ["stopped"]
    assert await h.engine.reserve(["q"], 1, None, 0.0, "W") == []  # restarted with the same id
    (view,) = await admin.workers()
    assert (view.state, view.stopped_at, view.last_reserve) == ("live", 0, h.now)


@pytest.mark.postgres_only(reason="two nodes on one database")
async def test_a_stop_reaches_every_node_and_a_later_reserve_on_another_node_wins(
        make_harness: HarnessFactory) -> None:
    """Two nodes on one PostgreSQL schema, each reporting its workers as its heartbeat does:
    the stop node one recorded is what node two lists; the worker reserving again through node
    two afterwards is live on both; a stop through node two after that is stopped on both."""
    shared = {"postgres": PostgresSettings(schema=fresh_schema())}
    one = await make_harness(node_name="n1", storage_settings=shared)
    two = await make_harness(node_name="n2", storage_settings=shared)
    admins = [AdminEngine(one.parts, one.store.admin), AdminEngine(two.parts, two.store.admin)]

    async def report() -> list[tuple[str, int]]:
        for h in (one, two):
            await h.store.report_workers(h.parts.node, h.parts.workers.snapshot(h.parts.node), 0)
        seen = []
        for admin in admins:
            (view,) = await admin.workers()
            seen.append((view.state, view.stopped_at))
        return seen

    assert await one.engine.reserve(["q"], 1, None, 0.0, "W", host="h") == []
    one.clock.advance(1)
    two.clock.advance(1)
    one.engine.stop_reserving("W", stopped=True)
    assert await report() == [("stopped", one.now)] * 2
    one.clock.advance(1)
    two.clock.advance(1)
    assert await two.engine.reserve(["q"], 1, None, 0.0, "W", host="h") == []  # restarted, through node two
    assert await report() == [("live", 0)] * 2
    one.clock.advance(1)
    two.clock.advance(1)
    two.engine.stop_reserving("W", stopped=True)
    assert await report() == [("stopped", two.now)] * 2
