"""The ``Sweeper`` service: runs the passes on the event loop with configurable intervals.

Failures are isolated: the store skips a row it cannot
process and reports it (``SweepResult.skipped``); the sweeper logs it with the job id and
queue, counts it in ``skipped`` (``sepp_sweep_skipped_total{pass=...}`` on /metrics), and
every other row of the pass is still handled. A pass that fails as a whole (the store
cannot write) is logged and counted in ``failures``; it never stops the other passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence

from sepp.domain.clock import Clock
from sepp.domain.params import SkippedRow, SweepResult
from sepp.domain.states import State
from sepp.server.parts import ServerParts
from sepp.storage.errors import StoreClosed, StoreUnavailable
from sepp.wire import quote

log = logging.getLogger("sepp.sweeper")

#: Rows a single pass touches at most (keeps each write transaction short).
PASS_LIMIT = 5_000
#: A row skipped again and again is logged at WARNING at most once per this many seconds
#: (each skip is still counted); the repeats in between go to DEBUG.
SKIP_LOG_EVERY = 60.0
#: Skipped rows one pass logs at WARNING one by one; the rest go in one summary line.
SKIP_LOG_FIRST = 10
#: Most rows whose last WARNING time is remembered (the table is cleared when full).
_SKIP_LOG_MEMORY = 10_000

PASSES = ("promote", "reclaim", "prune")


class Sweeper:
    """Promotion (timer to the next due job) plus a periodic reclaim/prune loop.

    ``interval`` is the longest sleep between passes, seconds. ``passes`` counts completed
    passes by name, ``skipped`` the rows each pass skipped (left unprocessed, tried again by
    the next pass), and ``failures`` the passes that failed as a whole — for tests and metrics.

    ``parts`` are the node's shared parts (store, queues, notifier, events). ``clock`` (default
    ``parts.clock``) gives every time a pass reads: the
    ``now`` of promotion, reclaim and prune (µs UTC), the time to the next due job and the
    log rate limit of skipped rows. The loops sleep in real time. ``run_once()`` runs one
    pass of each sweep at once, without the loops (tests drive it with a ``FakeClock``).
    """

    def __init__(self, parts: ServerParts, interval: float, *, clock: Clock | None = None) -> None:
        self.parts = parts
        self.interval = interval
        #: The clock the passes read (``parts.clock`` unless given).
        self.clock: Clock = parts.clock if clock is None else clock
        self._wake = asyncio.Event()
        self._next_due: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.passes: dict[str, int] = dict.fromkeys(PASSES, 0)
        self.skipped: dict[str, int] = dict.fromkeys(PASSES, 0)
        self.failures: dict[str, int] = dict.fromkeys(PASSES, 0)
        self._skip_logged: dict[tuple[str, bytes, str | None], float] = {}
        self._promote_skipped = False
        parts.events.scheduled.subscribe(self.hint)

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

    def _note_skipped(self, name: str, rows: Sequence[SkippedRow]) -> None:
        """Count and log the rows pass ``name`` skipped: WARNING once per ``SKIP_LOG_EVERY``
        seconds per row (DEBUG in between), and of those at most ``SKIP_LOG_FIRST`` lines per
        pass, the rest in one summary line with their count (a first pass over 1,500 poison
        rows logged 1,500 warnings)."""
        if not rows:
            return
        self.skipped[name] += len(rows)
        now = self.clock.monotonic()
        if len(self._skip_logged) > _SKIP_LOG_MEMORY:
            self._skip_logged.clear()
        warned = 0
        for row in rows:
            ident = (name, row.job_id, row.key)
            last = self._skip_logged.get(ident)
            level = logging.DEBUG if last is not None and now - last < SKIP_LOG_EVERY else logging.WARNING
            if level == logging.WARNING:
                self._skip_logged[ident] = now
                warned += 1
                if warned > SKIP_LOG_FIRST:
                    level = logging.DEBUG
            raw = row.job_id
            job_id = (str(uuid.UUID(bytes=raw)) if isinstance(raw, bytes) and len(raw) == 16
                      else raw.hex() if isinstance(raw, bytes) else quote(str(raw)))
            what = f"idempotency key {quote(row.key)} of job" if row.key is not None else "job"
            log.log(level, "%s pass skipped %s %s in queue %s (the other rows were handled; "
                    "it is tried again by the next pass): %s", name, what, job_id, quote(str(row.queue)), row.error)
        if warned > SKIP_LOG_FIRST:
            log.warning("%s pass skipped %d more rows not logged one by one (%d skipped in this pass; "
                        "each is counted in sepp_sweep_skipped_total and logged at DEBUG)",
                        name, warned - SKIP_LOG_FIRST, len(rows))

    async def run_once(self) -> dict[str, SweepResult]:
        """One pass of each sweep now, in the order promote, reclaim, prune, at the clock's
        current time, without waiting for the loops (which need not be started).

        Returns each pass's ``SweepResult`` by name (``PASSES``): ``count`` is the rows
        promoted, reclaimed or deleted (at most ``PASS_LIMIT`` each), ``queues`` the queues
        that got READY jobs, ``dead_lettered`` the jobs a reclaim dead-lettered per queue,
        ``skipped`` the rows left as they were. The passes have the loops' side effects
        (reservers woken, ``events.finished`` emitted, ``passes`` / ``skipped`` counted). Raises
        what the store raises (``StoreError``, ``StoreClosed``); a failing pass stops the rest.
        """
        return {"promote": await self._promote(), "reclaim": await self._reclaim(), "prune": await self._prune()}

    async def promote_once(self) -> int:
        """One promotion pass; wakes reservers of queues that got jobs. Returns how many moved."""
        return (await self._promote()).count

    async def _promote(self) -> SweepResult:
        now = self.clock.now()
        result = await self.parts.store.promote_due(now, PASS_LIMIT)
        if result.promoted_run_at:
            self.parts.events.promoted(now, result.promoted_run_at)
        if result.promoted_jobs and self.parts.job_events.active:
            self.parts.job_events.promoted(result.promoted_jobs, now)
        for name in result.queues:
            self.parts.notifier.ready(name)
        self._note_skipped("promote", result.skipped)
        self._promote_skipped = bool(result.skipped)
        self.passes["promote"] += 1
        return result

    async def _promote_loop(self) -> None:
        store = self.parts.store
        while True:
            # Clear before reading: a hint that arrives while next_due() is being read must
            # still cut the sleep short (clearing after the read would lose it).
            self._wake.clear()
            self._promote_skipped = False
            try:
                moved = await self.promote_once()
                if moved >= PASS_LIMIT:
                    continue
                self._next_due = await store.next_due()
            except StoreClosed:
                return
            except Exception as exc:
                self._failed("promote", exc)
                self._next_due = None
            now = self.clock.now()
            sleep = self.interval
            if self._next_due is not None and (self._next_due > now or not self._promote_skipped):
                # (A due job the pass skipped keeps next_due in the past: then the interval,
                # not zero — the pass would only skip it again at once.)
                sleep = min(sleep, max(0.0, (self._next_due - now) / 1e6))
            if sleep > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), sleep)

    async def reclaim_once(self) -> int:
        """One lease-expiry pass. Returns how many leases were reclaimed."""
        return (await self._reclaim()).count

    async def _reclaim(self) -> SweepResult:
        parts = self.parts
        policies = parts.queues.policies()
        result = await parts.store.reclaim_expired(self.clock.now(), PASS_LIMIT, policies)
        for name in result.queues:
            parts.notifier.ready(name)
        for name in result.expired.keys() - result.queues:
            if policies(name).wake_on_settle:  # DEAD_LETTERED / CANCELLED: a flow-limited slot freed
                parts.notifier.ready(name)
        for name, count in result.dead_lettered.items():
            parts.events.finished(name, int(State.DEAD_LETTERED), count)
        if result.expired:
            parts.events.leases_expired(result.expired, result.dead_lettered)
        if result.expired_types:
            parts.events.reclaimed(result.expired_types)
        if result.reclaimed_jobs and parts.job_events.active:
            parts.job_events.reclaimed(result.reclaimed_jobs, self.clock.now())
        if result.count:
            self._log_reclaimed(result)
        self._note_skipped("reclaim", result.skipped)
        self.passes["reclaim"] += 1
        return result

    @staticmethod
    def _log_reclaimed(result: SweepResult) -> None:
        """The lines of a reclaim pass that found expired leases: one
        ``lease_expired`` line with how many and the queues that got jobs back, and one
        ``job_dead_lettered`` line per queue whose jobs were on their last attempt (reason
        ``lease_expired``). At most one pass's worth per ``sweep_interval``."""
        dead = sum(result.dead_lettered.values())
        queues = sorted(result.queues | set(result.dead_lettered))
        log.warning("%d expired lease(s) reclaimed (queues %s)%s", result.count,
                    ", ".join(quote(q) for q in queues) or "-",
                    f"; {dead} of them on their last attempt were dead-lettered" if dead else "",
                    extra={"event": "lease_expired", "count": result.count, "queues": queues})
        for name, count in sorted(result.dead_lettered.items()):
            log.warning("%d job(s) of queue %s dead-lettered (lease_expired: the lease of their last attempt "
                        "expired)", count, quote(name),
                        extra={"event": "job_dead_lettered", "queue": name, "count": count, "reason": "lease_expired"})

    async def prune_once(self) -> int:
        """One retention pass. Returns rows deleted."""
        return (await self._prune()).count

    async def _prune(self) -> SweepResult:
        result = await self.parts.store.prune(self.clock.now(), PASS_LIMIT)
        self._note_skipped("prune", result.skipped)
        self.passes["prune"] += 1
        return result

    def _failed(self, name: str, exc: Exception) -> None:
        """Count a pass that failed as a whole and log it: with its traceback, except when the
        database is unreachable (``StoreUnavailable``, e.g. PostgreSQL restarting), which is
        one warning line at most every ``SKIP_LOG_EVERY`` seconds per pass."""
        self.failures[name] += 1
        if not isinstance(exc, StoreUnavailable):
            log.error("%s pass failed", name, exc_info=exc)
            return
        now = self.clock.monotonic()
        key = (name, b"", "unavailable")
        if now - self._skip_logged.get(key, -SKIP_LOG_EVERY) >= SKIP_LOG_EVERY:
            self._skip_logged[key] = now
            log.warning("%s pass failed: %s (the passes go on and resume when the database is back)", name, exc)

    async def _maintenance_loop(self) -> None:
        while True:
            busy = False
            for name, run in (("reclaim", self.reclaim_once), ("prune", self.prune_once)):
                try:
                    busy = await run() >= PASS_LIMIT or busy
                except StoreClosed:
                    return
                except Exception as exc:  # the other pass still runs; this one again next time
                    self._failed(name, exc)
            if not busy:
                await asyncio.sleep(self.interval)
