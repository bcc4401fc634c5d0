"""Throughput history for 24 hours: the admin engine's stats window of
1 h / 6 h / 24 h over a real store and a fake clock, written through the flush as the server
does, on each backend."""

from __future__ import annotations

from engine.engine_kit import Harness
from sepp.server.admin import AdminEngine
from sepp.server.admin.stats import KEEP_MINUTES

HOUR_US = 3600 * 1_000_000


async def test_the_stats_window_reaches_back_a_day_and_no_further(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin, flush_interval=3600)
    await admin.start()
    try:
        for _ in range(3):
            await h.enqueue()
        await h.writes_done()
        await admin.flush()                      # into the store's table, as the flush loop does
        h.clock.advance(us=3 * HOUR_US)
        await h.enqueue()
        await h.writes_done()

        def enqueued(minutes: int) -> int:
            return sum(r.enqueued for r in views[minutes][0].throughput)

        views = {m: await admin.stats(["q"], minutes=m) for m in (60, 6 * 60, 24 * 60)}
        assert {m: len(v[0].throughput) for m, v in views.items()} == {60: 60, 360: 360, 1440: 1440}
        assert (enqueued(60), enqueued(360), enqueued(1440)) == (1, 4, 4)
        await admin.flush()
        h.clock.advance(us=22 * HOUR_US)         # 25 h after the first three
        await admin.flush()                      # prunes minutes older than a day
        views = {m: await admin.stats(["q"], minutes=m) for m in (60, 6 * 60, 24 * 60)}
        assert (enqueued(60), enqueued(360), enqueued(1440)) == (0, 0, 1)
        assert len((await admin.stats(["q"], minutes=10 * KEEP_MINUTES))[0].throughput) == KEEP_MINUTES
    finally:
        await admin.stop()
