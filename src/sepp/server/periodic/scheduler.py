"""``PeriodicScheduler``: every node runs every schedule of the store.

Each node keeps a heap of (next tick, name) and sleeps until the earliest — so an idle node
with 10,000 schedules does nothing but sleep (benchmarks/periodic_idle.py). When a tick is
due, the node re-reads the due schedules' rows (paused, deleted, changed on another node?),
enqueues one job per tick through the engine (``enqueue_batch``: validation, events and
wake-ups as any producer's) with the idempotency key ``periodic:<name>:<tick, UTC, RFC 3339>``
(``timetable.tick_key``) and ``scheduled_at`` = the tick, then records the run in the row
(``Store.record_periodic_runs``). Several nodes — or one node before and after a restart —
firing the same tick send the same key, so the queue's ordinary dedup makes it one job:
there is no other exactly-once mechanism. The key's claim is kept at least until the
schedule's next tick plus ``CLAIM_MARGIN`` (``tick_claim_us``), however short the queue's
``dedup_window`` is (0 included). (A node that reads a row whose ``last_tick``
is already the tick skips the enqueue: that saves a round trip, nothing more.)

Downtime and ``catch_up``: when a node starts (or first sees a schedule), the ticks after
``max(last_tick, active_since)`` and up to now came due while no node of this one's kind
was watching. ``catch_up = "latest"`` enqueues one job for them, for the most recent
missed tick; ``"none"`` enqueues none. Ticks that come due while the node runs are always
run, one job each: a node that wakes late (a blocked or starved loop) runs every tick that
came due since it last looked, at most ``LATE_TICKS`` of them (then the most recent one
too, and a warning says how many were left out).

``run_due()`` does one round at ``clock.now()`` without the loop (tests drive it with a
``FakeClock``); ``reload()`` reads the schedules from the store once. The loop sleeps in
real time; on a shared store (PostgreSQL) it also reloads every ``refresh_every`` seconds
and when another node says a schedule changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from sepp.domain.ids import job_id_bytes
from sepp.domain.records import PeriodicRecord, PeriodicRun
from sepp.quoting import clip
from sepp.rejections import CodedRejection, code_name
from sepp.server.engine import JobEngine
from sepp.server.errors import BacklogFull
from sepp.server.parts import ServerParts
from sepp.server.periodic.jobs import job_request
from sepp.server.periodic.spec import PeriodicSettings
from sepp.server.periodic.timetable import Timetable, rfc3339, tick_key
from sepp.storage.errors import StoreClosed, StoreError

log = logging.getLogger("sepp.periodic")

__all__ = ["CLAIM_MARGIN", "MAX_SLEEP", "REFRESH_EVERY", "RETRY_AFTER", "Entry", "PeriodicScheduler", "tick_claim_us"]

#: Longest sleep of the loop, seconds (a clock step is noticed within it).
MAX_SLEEP = 60.0
#: Seconds between two reloads of the schedules on a shared store (another node's change is
#: seen within this bound even if its notification was lost).
REFRESH_EVERY = 5.0
#: Seconds before a run that could not be stored (store away, overload) is tried again.
RETRY_AFTER = 1.0
#: Most ticks of one schedule a late round runs one by one (the oldest first); past that the
#: most recent due tick is run too and the ones between are left out (logged).
LATE_TICKS = 100
_S = 1_000_000
#: Slack added to a tick's idempotency claim past the schedule's next tick, µs: covers nodes
#: whose clocks or loops lag (see ``tick_claim_us``).
CLAIM_MARGIN = 3600 * _S


@dataclass
class Entry:
    """What this node knows of one schedule: its row as last read, the parsed definition
    (None when it no longer validates: ``broken`` says why), the tick it fires next and a
    missed tick still to run (``pending``, 0 = none)."""

    record: PeriodicRecord
    spec: PeriodicSettings | None
    timetable: Timetable | None
    broken: str = ""
    next_tick: int = 0
    pending: int = 0


def tick_claim_us(entry: Entry, tick: int, now: int) -> int:
    """How long (µs from ``now``) the idempotency key of ``entry``'s job for ``tick`` must be
    kept so that no node makes a second job for the tick: until the schedule's next tick
    after it (a node that missed ``tick`` runs it, late or as the catch-up after a restart,
    only until a later tick is due), plus ``CLAIM_MARGIN``. The queue's ``dedup_window``
    applies when it is longer; exactly once must not hang on it (a queue with
    ``dedup_window = 0`` still gets one job per tick)."""
    nxt = entry.timetable.next_after(tick) if entry.timetable is not None else None
    return max(0, (nxt or tick) - now) + CLAIM_MARGIN


def parse(record: PeriodicRecord) -> tuple[PeriodicSettings | None, Timetable | None, str]:
    """A stored definition parsed: (settings, timetable, "") or (None, None, why not)."""
    try:
        spec = PeriodicSettings.from_json(record.definition)
    except (ValueError, ValidationError) as exc:
        return None, None, clip(" ".join(str(exc).split()), 300)
    return spec, Timetable(spec), ""


class PeriodicScheduler:
    """Runs the store's schedules on this node (see the module docstring).

    ``parts``: the node's shared parts (store, clock, limits); ``engine``: what enqueues the
    ticks' jobs (``enqueue_batch``). ``declared``: the ``[[periodic]]`` tables of the config, written into the store by
    ``start`` (source ``"config"``; an unchanged one is not rewritten). ``refresh_every`` /
    ``max_sleep``: seconds (tests shorten them). ``runs`` counts the jobs this node enqueued
    (deduplicated ones included), ``rounds`` the rounds that fired anything.
    """

    def __init__(self, parts: ServerParts, engine: JobEngine, declared: Sequence[PeriodicSettings] = (), *,
                 refresh_every: float = REFRESH_EVERY, max_sleep: float = MAX_SLEEP) -> None:
        self.parts = parts
        self.engine = engine
        self.store = parts.store
        self.clock = parts.clock
        self.declared = tuple(declared)
        self.refresh_every = refresh_every
        self.max_sleep = max_sleep
        #: The schedules by name.
        self.entries: dict[str, Entry] = {}
        self._heap: list[tuple[int, str]] = []
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._retry_at = 0
        self.runs = 0
        self.rounds = 0

    # ------------------------------------------------------------------ lifecycle

    async def write_declared(self) -> None:
        """Write the config's schedules into the store (created, or the definition replaced
        when it differs; paused and the last run are kept)."""
        if not self.declared:
            return
        now = self.clock.now()
        stored = {r.name: r for r in await self.store.load_periodic([s.name for s in self.declared])}
        for spec in self.declared:
            text = spec.to_json()
            have = stored.get(spec.name)
            if have is None or have.definition != text or have.source != "config":
                await self.store.put_periodic(spec.name, text, "config", now)

    async def start(self) -> None:
        """Write the declared schedules, read every schedule, start the loop. Raises
        ``StoreError`` when the store cannot be read or written."""
        await self.write_declared()
        await self.reload()
        if self.store.shared:
            self.store.subscribe(lambda _queue: None, self._changed.set)
        self._task = asyncio.create_task(self._loop(), name="sepp-periodic")

    async def stop(self) -> None:
        """Stop the loop (a round in progress is cancelled; its ticks are run again by the
        next start, deduplicated by their keys). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ the schedules

    async def reload(self, names: Sequence[str] | None = None) -> None:
        """Read the schedules (those named, or all) from the store and bring the entries in
        step: new and changed ones are armed (their missed ticks judged), deleted ones
        dropped. Raises ``StoreError``."""
        rows = await self.store.load_periodic(names)
        now = self.clock.now()
        seen = {r.name for r in rows}
        gone = (set(self.entries) if names is None else set(names)) - seen
        for name in gone:
            self.entries.pop(name, None)
        for i, row in enumerate(rows):
            self._take(row, now)
            if i % 500 == 499:
                await asyncio.sleep(0)  # thousands of schedules: let the other tasks run in between
        self._wake.set()

    def _take(self, row: PeriodicRecord, now: int) -> None:
        """Adopt ``row``: a new or changed definition, or a resume, re-arms the entry."""
        entry = self.entries.get(row.name)
        if entry is not None and entry.record.definition == row.definition and entry.record.paused == row.paused \
                and entry.record.active_since == row.active_since:
            entry.record = row  # only the last run moved
            return
        spec, timetable, broken = parse(row)
        if broken and (entry is None or entry.broken != broken):
            log.warning("periodic schedule %s is not run: its stored definition is invalid (%s)", row.name, broken)
        entry = Entry(row, spec, timetable, broken)
        self.entries[row.name] = entry
        self._arm(entry, now)

    def _arm(self, entry: Entry, now: int) -> None:
        """Judge the missed ticks (``catch_up``) and push the next tick."""
        row, spec, timetable = entry.record, entry.spec, entry.timetable
        entry.pending = 0
        entry.next_tick = 0
        if spec is None or timetable is None or row.paused:
            return
        floor = max(row.last_tick, row.active_since)
        first = timetable.next_after(floor)  # the first tick no job was enqueued for
        if first is not None and first > now:
            nxt: int | None = first  # nothing missed (the usual case: one cronsim step)
        else:
            if first is not None and spec.catch_up == "latest":
                entry.pending = timetable.latest_at_or_before(now) or first  # ≥ first > floor
            nxt = timetable.next_after(now)
        if nxt is not None:
            entry.next_tick = nxt
            heapq.heappush(self._heap, (nxt, row.name))

    def next_wake(self) -> int | None:
        """When this node has something to run next (µs UTC), or None."""
        if any(e.pending for e in self.entries.values()):
            return max(self.clock.now(), self._retry_at)
        while self._heap:
            tick, name = self._heap[0]
            entry = self.entries.get(name)
            if entry is not None and entry.next_tick == tick:
                return tick
            heapq.heappop(self._heap)  # a stale slot: re-armed, paused or deleted since
        return None

    # ------------------------------------------------------------------ firing

    def _due(self, now: int) -> dict[str, list[int]]:
        """Pop every schedule with a tick due at ``now``: name → the ticks to run, oldest
        first — a pending catch-up tick, then every tick that came due since the entry was
        armed (at most ``LATE_TICKS`` plus the most recent one; see the module docstring)."""
        due = {name: [e.pending] for name, e in self.entries.items() if e.pending}
        heap = self._heap
        while heap and heap[0][0] <= now:
            tick, name = heapq.heappop(heap)
            entry = self.entries.get(name)
            if entry is None or entry.next_tick != tick or entry.timetable is None:
                continue
            ticks = due.setdefault(name, [])
            timetable = entry.timetable
            t: int | None = tick
            late: list[int] = []
            while t is not None and t <= now and len(late) < LATE_TICKS:
                late.append(t)
                t = timetable.next_after(t)
            if t is not None and t <= now:
                latest = timetable.latest_at_or_before(now) or late[-1]
                log.warning("periodic schedule %s: the node woke late; ran %d of the due ticks and the latest "
                            "(%s), left out the ones between", name, len(late), rfc3339(latest),
                            extra={"event": "periodic_late", "schedule": name})
                late.append(latest)
            ticks.extend(x for x in late if not ticks or x > ticks[-1])
            nxt = timetable.next_after(now)
            entry.next_tick = nxt or 0
            if nxt is not None:
                heapq.heappush(heap, (nxt, name))
        for name in due:
            self.entries[name].pending = 0
        return due

    async def run_due(self) -> list[PeriodicRun]:
        """One round at ``clock.now()``: enqueue a job for every due tick (see the module
        docstring) and record the runs. Returns the runs recorded. A run that could not be
        stored (store away, overload) stays pending and is tried again after
        ``RETRY_AFTER``; raises nothing but ``StoreClosed``."""
        now = self.clock.now()
        due = self._due(now)
        if not due:
            return []
        try:
            rows = {r.name: r for r in await self.store.load_periodic(list(due))}
        except StoreClosed:
            raise
        except StoreError as exc:
            log.warning("periodic: %d due schedule(s) not run yet, the store cannot be read (%s); trying again in "
                        "%g s", len(due), exc, RETRY_AFTER)
            self._hold(due, now)
            return []
        fire: list[tuple[Entry, int]] = []
        for name, ticks in due.items():
            row = rows.get(name)
            if row is None:  # deleted on another node
                self.entries.pop(name, None)
                continue
            entry = self.entries[name]
            if row.definition != entry.record.definition or row.paused != entry.record.paused \
                    or row.active_since != entry.record.active_since:
                self._take(row, now)  # changed on another node: re-armed from the row
                entry = self.entries[name]
                if entry.pending:
                    ticks, entry.pending = [entry.pending], 0
                else:
                    continue
            entry.record = row
            if row.paused or entry.spec is None:
                continue
            # A tick at or before last_tick was run by another node already (the key would dedup it).
            fire.extend((entry, tick) for tick in ticks if tick > row.last_tick)
        if not fire:
            return []
        runs = await self._enqueue(fire, now)
        if runs:
            self.rounds += 1
        return runs

    def _hold(self, due: dict[str, list[int]], now: int) -> None:
        """Keep ``due`` pending (the most recent tick of each schedule: a round the store
        refused runs like a catch-up) and wake again after ``RETRY_AFTER``."""
        for name, ticks in due.items():
            entry = self.entries.get(name)
            if entry is not None and ticks:
                entry.pending = max(entry.pending, max(ticks))
        self._retry_at = now + int(RETRY_AFTER * _S)

    async def _enqueue(self, fire: list[tuple[Entry, int]], now: int) -> list[PeriodicRun]:
        """Enqueue ``fire``'s jobs in batches, record the runs."""
        cap = self.parts.limits.max_enqueue_batch
        runs: list[PeriodicRun] = []
        for start in range(0, len(fire), cap):
            chunk = fire[start:start + cap]
            reqs = [job_request(e.spec, tick, tick_key(e.record.name, tick)) for e, tick in chunk]  # type: ignore[arg-type]
            try:
                results = await self.engine.enqueue_batch(reqs, [tick_claim_us(e, tick, now) for e, tick in chunk])
            except (BacklogFull, StoreError) as exc:
                if isinstance(exc, StoreClosed):
                    raise
                log.warning("periodic: %d run(s) not stored yet (%s); trying again in %g s", len(chunk),
                            "Overloaded" if isinstance(exc, BacklogFull) else exc, RETRY_AFTER)  # the wire's word
                held: dict[str, list[int]] = {}
                for e, tick in fire[start:]:
                    held.setdefault(e.record.name, []).append(tick)
                self._hold(held, now)
                break
            for (entry, tick), result in zip(chunk, results, strict=True):
                runs.append(self._result(entry, tick, result, now))
        if runs:
            # One run per schedule, its latest tick: PostgreSQL's UPDATE … FROM applies only
            # one of several source rows that match the same row.
            latest: dict[str, PeriodicRun] = {}
            for run in runs:
                if run.name not in latest or run.tick >= latest[run.name].tick:
                    latest[run.name] = run
            try:
                await self.store.record_periodic_runs(list(latest.values()))
            except StoreClosed:
                raise
            except StoreError as exc:  # the jobs are stored; a restart re-sends their keys (dedup)
                log.warning("periodic: %d run(s) enqueued but not recorded (%s)", len(runs), exc)
        return runs

    def _result(self, entry: Entry, tick: int, result: CodedRejection | tuple[str, bool], now: int) -> PeriodicRun:
        """The run of one enqueue result (a rejection, or the job id and whether it was
        deduplicated), logged; the entry's copy of the row updated."""
        name = entry.record.name
        if not isinstance(result, tuple):
            error = f"{code_name(result.code)}: {result.message}"
            log.warning("periodic schedule %s: the job of tick %s was rejected (%s)", name, rfc3339(tick), error,
                        extra={"event": "periodic_rejected", "schedule": name, "reason": error})
            run = PeriodicRun(name, tick, b"", clip(error, 500), now)
        else:
            job_id, deduplicated = result
            self.runs += 1
            log.debug("periodic schedule %s: tick %s → job %s%s", name, rfc3339(tick), job_id,
                      " (deduplicated)" if deduplicated else "")
            run = PeriodicRun(name, tick, job_id_bytes(job_id) or b"", "", now)
        row = entry.record
        entry.record = row._replace(last_tick=max(row.last_tick, tick), last_run_at=now, last_job_id=run.job_id,
                                    last_error=run.error)
        return run

    # ------------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_refresh = loop.time() + self.refresh_every
        while True:
            self._wake.clear()  # before the round: a change made during it wakes the next wait
            try:
                await self.run_due()
            except StoreClosed:
                return
            except Exception:  # never let one bad round stop the schedules
                log.exception("periodic: a round failed; the next one runs as planned")
            now = self.clock.now()
            wake = self.next_wake()
            sleep = self.max_sleep if wake is None else max(0.0, (wake - now) / _S)
            if self.store.shared:
                sleep = min(sleep, max(0.0, next_refresh - loop.time()))
            waits = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(self._changed.wait())]
            try:
                await asyncio.wait(waits, timeout=min(sleep, self.max_sleep), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if self.store.shared and (self._changed.is_set() or loop.time() >= next_refresh):
                self._changed.clear()
                next_refresh = loop.time() + self.refresh_every
                try:
                    await self.reload()
                except StoreClosed:
                    return
                except StoreError as exc:
                    log.warning("periodic schedules not refreshed: %s", exc)
