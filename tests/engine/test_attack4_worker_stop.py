"""attack4: a clean stop (StopReserving stopped=true) with two processes sharing one worker
id, and odd ids."""

from __future__ import annotations

import asyncio

import pytest

from engine.engine_kit import Harness
from sepp.server.admin import AdminEngine
from sepp.server.errors import InvalidRequest


async def test_one_of_two_same_id_workers_stops_the_other_keeps_reserving(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    await h.enqueue("q")
    assert len(await h.engine.reserve(["q"], 1, None, 0.0, "W")) == 1
    other = asyncio.create_task(h.engine.reserve(["q"], 1, None, 30.0, "W"))  # the second process, parked
    await asyncio.sleep(0.05)
    h.clock.advance(1)
    h.engine.stop_reserving("W", stopped=True)  # the first process's last call
    assert await asyncio.wait_for(other, 10) == []  # its parked poll answers empty early …
    assert [v.state for v in await admin.workers()] == ["stopped"]  # … and its end notes nothing
    h.clock.advance(1)
    assert await h.engine.reserve(["q"], 1, None, 0.0, "W") == []  # it reserves again
    assert [v.state for v in await admin.workers()] == ["live"]


async def test_odd_ids_in_a_final_stop(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin)
    with pytest.raises(InvalidRequest):
        h.engine.stop_reserving("", stopped=True)
    for wid in ("x" * 1025, "a\x00b", "x" * 1_000_000, "\u202e\u0007", " "):
        assert h.engine.stop_reserving(wid, stopped=True) == 0
    await h.enqueue("q")
    assert len(await h.engine.reserve(["q"], 1, None, 0.0, "real")) == 1
    assert [v.worker_id for v in await admin.workers()] == ["real"]
