"""The ``Sweeper`` service: runs the passes on the event loop with configurable intervals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from sepp.server.engine import JobEngine
from sepp.storage.base import State
from sepp.storage.errors import StoreClosed

log = logging.getLogger("sepp.sweeper")

#: Rows a single pass touches at most (keeps each write transaction short).
PASS_LIMIT = 5_000


class Sweeper:
    """Promotion (timer to the next due job) plus a periodic reclaim/prune loop.

    ``interval`` is the longest sleep between passes, seconds. ``passes`` counts
    completed passes by name, for tests and metrics.
    """

    def __init__(self, engine: JobEngine, interval: float) -> None:
        self.engine = engine
        self.interval = interval
        self._wake = asyncio.Event()
        self._next_due: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.passes: dict[str, int] = {"promote": 0, "reclaim": 0, "prune": 0}
        engine.on_scheduled = self.hint

    def hint(self, run_at: int) -> None:
        """A SCHEDULED job due at ``run_at`` (µs) was stored: wake earlier if needed."""
        if self._next_due is None or run_at < self._next_due:
            self._next_due = run_at
            self._wake.set()

    async def start(self) -> None:
        """Start both loops."""
        self._tasks = [asyncio.create_task(self._promote_loop(), name="sepp-promote"),
                       asyncio.create_task(self._maintenance_loop(), name="sepp-maintenance")]

    async def stop(self) -> None:
        """Cancel the loops and wait for them. Idempotent."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, StoreClosed):
                await task
        self._tasks = []

    async def promote_once(self) -> int:
        """One promotion pass; wakes reservers of queues that got jobs. Returns how many moved."""
        store = self.engine.store
        now = time.time_ns() // 1000
        result = await store.promote_due(now, PASS_LIMIT)
        for name in result.queues:
            self.engine.notifier.ready(name)
        self.passes["promote"] += 1
        return result.count

    async def _promote_loop(self) -> None:
        store = self.engine.store
        while True:
            # Clear before reading: a hint that arrives while next_due() is being read must
            # still cut the sleep short (clearing after the read would lose it).
            self._wake.clear()
            try:
                moved = await self.promote_once()
                if moved >= PASS_LIMIT:
                    continue
                self._next_due = await store.next_due()
            except StoreClosed:
                return
            except Exception:
                log.exception("promotion pass failed")
                self._next_due = None
            now = time.time_ns() // 1000
            sleep = self.interval
            if self._next_due is not None:
                sleep = min(sleep, max(0.0, (self._next_due - now) / 1e6))
            if sleep > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), sleep)

    async def reclaim_once(self) -> int:
        """One lease-expiry pass. Returns how many leases were reclaimed."""
        now = time.time_ns() // 1000
        result = await self.engine.store.reclaim_expired(now, PASS_LIMIT, self.engine.queues.policies())
        for name in result.queues:
            self.engine.notifier.ready(name)
        for name, count in result.dead_lettered.items():
            self.engine.on_finished(name, int(State.DEAD_LETTERED), count)
        self.passes["reclaim"] += 1
        return result.count

    async def prune_once(self) -> int:
        """One retention pass. Returns rows deleted."""
        deleted = await self.engine.store.prune(time.time_ns() // 1000, PASS_LIMIT)
        self.passes["prune"] += 1
        return deleted

    async def _maintenance_loop(self) -> None:
        while True:
            try:
                busy = await self.reclaim_once() >= PASS_LIMIT
                busy = await self.prune_once() >= PASS_LIMIT or busy
            except StoreClosed:
                return
            except Exception:
                log.exception("maintenance pass failed")
                busy = False
            if not busy:
                await asyncio.sleep(self.interval)
