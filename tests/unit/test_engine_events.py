"""Engine events are subscriber lists: a second (third, …) subscriber sits
next to the sweeper and the admin stats instead of replacing one, and a subscriber that
raises is logged while the others and the request go on.

In process over a real SQLite store in a temp folder (no mocks).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from sepp.api.v1 import common_pb2 as pb
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.events import Event
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry
from sepp.server.sweeper.runner import Sweeper
from sepp.storage.base import Dedups, JobRow
from sepp.storage.sqlite import SQLiteStore


def test_two_subscribers_both_called_in_order_and_a_raising_one_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    event: Event[[int]] = Event("scheduled")
    seen: list[tuple[str, int]] = []

    def failing(run_at: int) -> None:
        seen.append(("failing", run_at))
        raise RuntimeError("subscriber bug")

    event.subscribe(failing)
    unsubscribe = event.subscribe(lambda run_at: seen.append(("second", run_at)))
    with caplog.at_level(logging.ERROR, logger="sepp.events"):
        event(7)  # does not raise
    assert seen == [("failing", 7), ("second", 7)]
    assert [r.getMessage() for r in caplog.records if r.name == "sepp.events"] == [
        f"subscriber {failing!r} of engine event scheduled raised; skipped"]
    unsubscribe()
    unsubscribe()  # idempotent
    seen.clear()
    event(8)
    assert seen == [("failing", 8)]
    assert event.subscribers == (failing,)


def test_engine_events_reach_every_subscriber_and_a_raising_one_does_not_fail_enqueue(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main(folder: Path) -> None:
        config = ServerConfig(data_dir=folder)
        store = SQLiteStore(folder, writer="thread")
        await store.open()
        try:
            registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes)
            parts = ServerParts.build(config, store, registry, Notifier())
            engine = JobEngine(parts)
            sweeper = Sweeper(parts, 60.0)  # subscribes its wake-up hint to parts.events.scheduled
            hinted: list[int] = []
            stored: list[int] = []
            parts.events.scheduled.subscribe(hinted.append)

            def broken(rows: Sequence[JobRow], dedups: Dedups) -> None:
                raise ValueError("metrics exporter down")

            parts.events.stored.subscribe(broken)
            parts.events.stored.subscribe(lambda rows, dedups: stored.append(len(rows)))
            assert parts.events.scheduled.subscribers[0] == sweeper.hint
            with pytest.raises(AttributeError):
                parts.events.scheduled = Event("replaced")  # type: ignore[misc]

            run_at_s = int(time.time()) + 3600
            ack = await engine.enqueue(pb.EnqueueRequest(queue="events", job_type="t",
                                                         scheduled_at=Timestamp(seconds=run_at_s)))
            assert ack.job_id
            assert hinted == [run_at_s * 1_000_000]
            assert sweeper._next_due == run_at_s * 1_000_000  # the sweeper still got it
            assert stored == [1]
        finally:
            await store.close()

    with tempfile.TemporaryDirectory() as tmp, caplog.at_level(logging.ERROR, logger="sepp.events"):
        asyncio.run(main(Path(tmp)))
    assert any("engine event stored raised" in r.getMessage() and r.exc_info for r in caplog.records)
