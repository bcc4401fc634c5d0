"""The queue gauges' store read, kept off the scrape path (docs/decisions.md
"Queue gauges: a background read, bounded-stale").

``sepp_queue_jobs{queue,state}`` and ``sepp_queue_oldest_ready_age_seconds{queue}`` come from
``AdminStore.queue_gauges`` — counts per state over every stored job, which costs tens to
hundreds of milliseconds with a million jobs, too much for a scrape. So:

* ``interval`` > 0 (the default, ``metrics_gauge_interval``): a scrape starts a background
  task that reads the store every ``interval`` seconds (each read bounded by
  ``READ_TIMEOUT``) for as long as scrapes keep coming (it stops after ``idle_after``
  seconds without one: an unscraped node does not pay for the reads); a scrape shows the
  latest read, so the values are at most ``interval`` plus one read old
  (``sepp_queue_gauges_age_seconds`` says how old). Only a scrape that finds no read young
  enough (the first one, the first after an idle spell) waits for one, at most
  ``SCRAPE_WAIT`` seconds.
* ``interval`` = 0: every scrape waits for a read that started after the scrape arrived
  (concurrent scrapes share one; a read already under way is waited out first), at most
  ``SCRAPE_WAIT`` seconds — exact values, for tests and small stores.

A read that fails or overruns counts in ``errors`` (``sepp_scrape_errors_total{reason=error|
timeout}``); a scrape with no read younger than ``stale_after`` omits the two gauges rather
than show old numbers. The reads run on the store's reader threads (SQLite) or as async
queries (PostgreSQL): never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from sepp.storage.admin import QueueGauges

log = logging.getLogger("sepp.metrics")

#: Longest a scrape waits for a store read, seconds.
SCRAPE_WAIT = 1.0
#: Longest a background read may take before it counts as a timeout, seconds.
READ_TIMEOUT = 30.0


class GaugeSampler:
    """Reads ``read()`` (``store.admin.queue_gauges``) as the module docstring says.

    ``errors`` counts failed reads by reason (``error``, ``timeout``). ``monotonic`` is the
    clock for ages (seconds; real time by default); ``idle_after`` overrides the default
    idle spell (seconds) after which the background reads stop."""

    def __init__(self, read: Callable[[], Awaitable[QueueGauges]], interval: float, *,
                 monotonic: Callable[[], float] = time.monotonic, idle_after: float | None = None) -> None:
        self._read = read
        self.interval = interval
        self._idle_after = idle_after
        #: Longest a scrape waits for a read, and a read may take (seconds; tests shorten them).
        self.scrape_wait, self.read_timeout = SCRAPE_WAIT, READ_TIMEOUT
        self._monotonic = monotonic
        self.errors: dict[str, int] = {"error": 0, "timeout": 0}
        self._latest: QueueGauges | None = None
        self._latest_at = 0.0
        self._inflight: asyncio.Task[QueueGauges | None] | None = None
        self._next: asyncio.Task[QueueGauges | None] | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._last_scrape = 0.0

    @property
    def idle_after(self) -> float:
        """Seconds without a scrape after which the background reads stop (restarted by the
        next scrape): four intervals, at least a minute."""
        return self._idle_after if self._idle_after is not None else max(60.0, 4 * self.interval)

    @property
    def stale_after(self) -> float:
        """Age (seconds) past which a read is no longer shown: two intervals plus a read."""
        return 2 * self.interval + self.scrape_wait

    async def _read_once(self) -> QueueGauges | None:
        try:
            gauges = await asyncio.wait_for(self._read(), self.read_timeout)
        except TimeoutError:
            self.errors["timeout"] += 1
            log.warning("reading the queue gauges took longer than %g s; gauges left out", self.read_timeout)
            return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.errors["error"] += 1
            log.warning("reading the queue gauges failed: %s", " ".join(str(exc).split()) or type(exc).__name__)
            return None
        self._latest, self._latest_at = gauges, self._monotonic()
        return gauges

    def _shared_read(self) -> asyncio.Task[QueueGauges | None]:
        task = self._inflight
        if task is None or task.done():
            task = self._inflight = asyncio.ensure_future(self._read_once())
        return task

    def _fresh_read(self) -> asyncio.Task[QueueGauges | None]:
        """A read that starts after this call (``interval`` = 0): one already under way may
        have begun before the event the scraper wants to see, so the scrape waits for it to
        end and shares the next one (every scrape arriving meanwhile shares that same one:
        at most one read runs, one waits)."""
        current = self._inflight
        if current is None or current.done():
            return self._shared_read()
        queued = self._next
        if queued is None or queued.done():
            async def after() -> QueueGauges | None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(current)
                return await self._shared_read()

            queued = self._next = asyncio.ensure_future(after())
        return queued

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self._shared_read()
            await asyncio.sleep(self.interval)
            if self._monotonic() - self._last_scrape > self.idle_after:
                return

    async def current(self) -> tuple[QueueGauges, float] | None:
        """The gauges to show and their age (seconds), or None when there is no read young
        enough (then the caller leaves the gauges out)."""
        if self.interval <= 0:
            task = self._fresh_read()
            try:
                gauges = await asyncio.wait_for(asyncio.shield(task), self.scrape_wait)
            except TimeoutError:
                self.errors["timeout"] += 1
                return None
            return None if gauges is None else (gauges, 0.0)
        self._last_scrape = self._monotonic()
        if self._loop_task is None or self._loop_task.done():
            self._shared_read()  # at once: the loop's first read is this one
            self._loop_task = asyncio.ensure_future(self._loop())
        if self._latest is None or self._monotonic() - self._latest_at > self.stale_after:
            pending = self._inflight
            if pending is not None and not pending.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(pending), self.scrape_wait)
        if self._latest is None:
            return None
        age = self._monotonic() - self._latest_at
        return None if age > self.stale_after else (self._latest, age)

    async def stop(self) -> None:
        """Cancel the background reads (server stop)."""
        for task in (self._loop_task, self._next, self._inflight):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._loop_task = self._inflight = None
