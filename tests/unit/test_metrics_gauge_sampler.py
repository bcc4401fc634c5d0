"""The queue gauges' background read (``sepp.server.metrics.gauges``): a scrape
shows the latest read, waits only when none is young enough, counts failed and hung reads,
leaves out a stale read, and the reads stop while nobody scrapes.

The read is a plain coroutine function here (its results, delays and failures are what the
sampler reacts to); tests/integration/test_metrics.py drives the same code with real stores.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from sepp.server.metrics.gauges import GaugeSampler
from sepp.storage.admin import QueueGauges, StateCounts


class Reads:
    """A read that returns numbered gauges (``ready`` = the read's number); ``hang`` makes
    the next reads wait until it is cleared, ``fail`` makes them raise."""

    def __init__(self) -> None:
        self.calls = 0
        self.hang = asyncio.Event()
        self.hang.set()
        self.fail = False

    async def __call__(self) -> QueueGauges:
        self.calls += 1
        await self.hang.wait()
        if self.fail:
            raise RuntimeError("storage fell over")
        return QueueGauges({"q": StateCounts(ready=self.calls)}, {})


def ready(shown: tuple[QueueGauges, float] | None) -> int | None:
    """The number of the read shown (None: nothing shown)."""
    return None if shown is None else shown[0].counts["q"].ready


async def wait_until(probe: Callable[[], bool]) -> None:
    """Poll ``probe`` every 10 ms for at most 5 s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while not probe():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_scrape_shows_the_latest_background_read_without_reading_itself() -> None:
    reads = Reads()
    sampler = GaugeSampler(reads, 0.1)
    try:
        assert ready(await sampler.current()) == 1  # the first scrape waits for the first read
        assert ready(await sampler.current()) == 1 and reads.calls == 1
        await wait_until(lambda: reads.calls >= 3)  # the loop reads every 0.1 s
        shown = await sampler.current()
        assert shown is not None and (ready(shown) or 0) >= 2 and 0 <= shown[1] < 0.5
    finally:
        await sampler.stop()


async def test_failed_and_hung_reads_count_and_a_stale_read_is_left_out() -> None:
    reads = Reads()
    ahead = 0.0  # how far the sampler's clock runs ahead of the real one (s)
    sampler = GaugeSampler(reads, 0.05, monotonic=lambda: time.monotonic() + ahead)
    sampler.scrape_wait, sampler.read_timeout = 0.1, 0.1
    try:
        assert ready(await sampler.current()) == 1
        reads.fail = True
        await wait_until(lambda: sampler.errors["error"] >= 1)
        reads.fail = False
        reads.hang.clear()
        await wait_until(lambda: sampler.errors["timeout"] >= 1)
        # Past 2 intervals + the scrape wait without a good read: nothing is shown.
        ahead += sampler.stale_after
        assert await sampler.current() is None
        reads.hang.set()
        await wait_until(lambda: sampler._latest is not None and sampler._latest.counts["q"].ready > 1)
        assert ready(await sampler.current()) is not None
    finally:
        reads.hang.set()
        await sampler.stop()


async def test_with_interval_zero_every_scrape_reads_and_waits_a_bounded_time() -> None:
    reads = Reads()
    sampler = GaugeSampler(reads, 0.0)
    sampler.scrape_wait = 0.1
    assert [ready(await sampler.current()) for _ in range(3)] == [1, 2, 3]
    reads.hang.clear()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await sampler.current() is None
    assert loop.time() - started < 1.0 and sampler.errors == {"error": 0, "timeout": 1}
    reads.hang.set()
    await sampler.stop()


async def test_the_reads_stop_while_nobody_scrapes_and_resume_with_the_next_scrape() -> None:
    reads = Reads()
    sampler = GaugeSampler(reads, 0.02, idle_after=0.1)
    try:
        await sampler.current()
        await asyncio.sleep(0.3)  # past idle_after without a scrape: the reads stop
        idle = reads.calls
        await asyncio.sleep(0.2)  # a check that nothing happens: no read without a scrape
        assert reads.calls == idle, "reads went on without scrapes"
        assert 2 <= idle <= 12
        await sampler.current()
        await wait_until(lambda: reads.calls >= idle + 2)
    finally:
        await sampler.stop()


@pytest.mark.parametrize("interval", [0.0, 0.05])
async def test_stop_cancels_a_read_in_flight(interval: float) -> None:
    reads = Reads()
    reads.hang.clear()
    sampler = GaugeSampler(reads, interval)
    sampler.scrape_wait = 0.05
    assert await sampler.current() is None
    await sampler.stop()
    assert sampler._inflight is None


async def test_with_interval_zero_a_scrape_never_shows_a_read_that_began_before_it() -> None:
    """A read under way when the scrape arrives may predate the event the scraper looks for
    (a lease reclaimed just before): the scrape waits it out and shows the next read, which
    every scrape arriving meanwhile shares."""
    reads = Reads()
    sampler = GaugeSampler(reads, 0.0)
    reads.hang.clear()
    first = asyncio.ensure_future(sampler.current())  # read 1 starts and hangs
    await wait_until(lambda: reads.calls == 1)
    later = [asyncio.ensure_future(sampler.current()) for _ in range(3)]  # arrive during read 1
    await asyncio.sleep(0.05)  # a check that nothing happens (below)
    assert reads.calls == 1  # nothing runs beside read 1
    reads.hang.set()
    assert ready(await first) == 1
    assert [ready(await t) for t in later] == [2, 2, 2]  # one fresh read, shared
    assert reads.calls == 2
    assert ready(await sampler.current()) == 3  # no read under way: a new one
