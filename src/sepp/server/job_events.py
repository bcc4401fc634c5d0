"""Live job events: what ``WatchJobs`` streams (docs/decisions.md "Live job events").

The engine reports each state change of a job here — enqueued, promoted, reserved,
progress, completed, retry scheduled, dead-lettered, cancelled, requeued — after the commit
that made it. ``JobEvents`` gives each event the node's next position and hands it to every
local ``Watcher`` whose filters select it, and, while another node has watchers, to the
``relay`` that sends it there (``sepp.server.event_relay``).

Nothing is built when nobody watches: every emitter checks ``JobEvents.active`` (a plain
attribute) first. A watcher's buffer is bounded (``ServerConfig.watch_buffer`` events): a
watcher whose buffer is full is cut off (``Watcher.behind`` says by how many events) and
dropped, so a slow consumer never slows the server down. Events are live and at-most-once:
correctness never depends on them (waits read the stored state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import NamedTuple

from sepp.domain.clock import Clock
from sepp.domain.params import SettleKind, SettleParams, SettleResult
from sepp.domain.records import Dedups, JobRecord, JobRow
from sepp.domain.states import State
from sepp.domain.transitions import ATTEMPTS_EXHAUSTED, CANCELLED_WHILE_RESERVED, LEASE_EXPIRED

#: The event kinds: the numbers of the wire enum ``JobEventKind`` (``JOB_EVENT_ENQUEUED`` …;
#: tests/unit/test_job_events.py holds them equal), kept here so the engine needs no wire code.
ENQUEUED, PROMOTED, RESERVED, PROGRESS, COMPLETED = 1, 2, 3, 4, 5
RETRY_SCHEDULED, DEAD_LETTERED, CANCELLED, REQUEUED = 6, 7, 8, 9
#: Kind number → lower-case name (``sepp jobs watch``, logs).
KIND_NAMES = {ENQUEUED: "enqueued", PROMOTED: "promoted", RESERVED: "reserved", PROGRESS: "progress",
              COMPLETED: "completed", RETRY_SCHEDULED: "retry_scheduled", DEAD_LETTERED: "dead_lettered",
              CANCELLED: "cancelled", REQUEUED: "requeued"}

_READY, _RESERVED, _SCHEDULED = int(State.READY), int(State.RESERVED), int(State.SCHEDULED)
_COMPLETED, _DEAD, _CANCELLED = int(State.COMPLETED), int(State.DEAD_LETTERED), int(State.CANCELLED)
_RELEASE, _DEAD_LETTER = SettleKind.RELEASE, SettleKind.DEAD_LETTER
_new = tuple.__new__

#: Events a watcher's buffer holds by default before it is cut off (``ServerConfig.watch_buffer``).
DEFAULT_WATCH_BUFFER = 10_000
#: Most job ids, queues and job types one watcher may filter on (INVALID_ARGUMENT beyond).
MAX_WATCH_IDS, MAX_WATCH_NAMES = 1_000, 100
#: Most jobs whose last progress time a node remembers to keep each job's event times in
#: order (``JobEvents`` "Times in order"); past it the oldest entry is forgotten.
MAX_PROGRESS_TIMES = 65_536


class JobEvent(NamedTuple):
    """One state change of one job. ``job_id`` is the 16-byte id; times are µs UTC; ``kind`` a
    ``JobEventKind`` number, ``state`` the job's state after the change; ``position`` the
    node's event counter (0 until ``JobEvents`` publishes it). The optional fields are set
    for the kinds the ``JobEvent`` message names them for."""

    position: int
    kind: int
    job_id: bytes
    queue: str
    job_type: str
    state: int
    at: int
    attempt: int
    worker_id: str = ""
    run_at: int = 0
    error: str = ""
    reason: str = ""
    progress: str = ""
    result_bytes: int = 0
    node: str = ""


class Watcher:
    """One ``WatchJobs`` call: its filters (None = any), its buffer of events not yet sent,
    and the event that wakes the stream.

    ``behind`` is 0 while the watcher keeps up; once its buffer of ``limit`` events is full it
    holds the number of events it missed (the buffered ones and every later one it would
    have got), and the watcher takes no more: the stream ends with that count. ``closed``:
    the server is stopping (the stream ends UNAVAILABLE)."""

    __slots__ = ("behind", "closed", "job_ids", "job_types", "limit", "pending", "queues", "wake")

    def __init__(self, job_ids: Collection[bytes] = (), queues: Collection[str] = (), job_types: Collection[str] = (),
                 limit: int = DEFAULT_WATCH_BUFFER) -> None:
        self.job_ids = frozenset(job_ids) or None
        self.queues = frozenset(queues) or None
        self.job_types = frozenset(job_types) or None
        self.limit = limit
        self.pending: list[JobEvent] = []
        self.wake = asyncio.Event()
        self.behind = 0
        self.closed = False

    def wants(self, event: JobEvent) -> bool:
        """Whether the filters select ``event`` (each given filter must hold)."""
        return ((self.job_ids is None or event.job_id in self.job_ids)
                and (self.queues is None or event.queue in self.queues)
                and (self.job_types is None or event.job_type in self.job_types))

    def offer(self, event: JobEvent) -> None:
        """Buffer ``event`` if the filters select it; a full buffer cuts the watcher off."""
        if not self.wants(event):
            return
        if self.behind:
            self.behind += 1
            return
        pending = self.pending
        if len(pending) >= self.limit:
            self.behind = len(pending) + 1
            pending.clear()
        else:
            pending.append(event)
        self.wake.set()

    def select(self, events: list[JobEvent]) -> list[JobEvent]:
        """The events of ``events`` the filters select, in order (``events`` itself when the
        watcher has none): one comprehension over the tuples' fields, no call per event."""
        ids, queues, types = self.job_ids, self.queues, self.job_types
        if ids is None and types is None:
            return events if queues is None else [e for e in events if e[3] in queues]
        if ids is None and queues is None:
            return [e for e in events if e[4] in types]  # type: ignore[operator]
        return [e for e in events if (ids is None or e[2] in ids) and (queues is None or e[3] in queues)
                and (types is None or e[4] in types)]

    def offer_all(self, events: list[JobEvent]) -> None:
        """``offer`` each of ``events`` (the filters already applied: ``select``), as one list
        extension while there is room; past the buffer the watcher is cut off with the count
        ``offer`` one by one would have reached."""
        if not events:
            return
        if self.behind:
            self.behind += len(events)
            return
        pending = self.pending
        room = self.limit - len(pending)
        if len(events) <= room:
            pending.extend(events)
        else:
            self.behind = self.limit + len(events) - room
            pending.clear()
        self.wake.set()

    def take(self) -> list[JobEvent]:
        """The buffered events, oldest first (the buffer is emptied)."""
        out, self.pending = self.pending, []
        self.wake.clear()
        return out


class JobEvents:
    """The node's live job events: watchers, positions, and the engine's emitters.

    ``node`` is named in every local event; ``clock`` stamps the events of changes whose time
    the store does not report; ``buffer`` is each watcher's bound (events).

    Times in order: a job's events are shown with times that never go back. A progress event
    is stamped when its extension was received (as a settle is), but it can commit after a
    settle received before it (PostgreSQL's committers run side by side; another node's clock
    for a relayed event): then the job's next event — its completion, say — would show an
    earlier time than the progress before it. So the node remembers the time of each job's
    last progress event it handed out (at most ``MAX_PROGRESS_TIMES`` jobs, the oldest
    forgotten first; nothing while nobody watches) and hands that job's next event out at no
    earlier time (``_ordered``). The stored times (``finished_at``) are not changed.

    ``active`` is True while a local watcher exists or another node has one
    (``remote_watchers``): the engine builds no event otherwise. ``relay`` (set by the
    cluster relay) is called with each local event while other nodes have watchers.
    """

    def __init__(self, node: str, clock: Clock, buffer: int = DEFAULT_WATCH_BUFFER) -> None:
        self.node = node
        self.clock = clock
        self.buffer = buffer
        self.active = False
        self.position = 0
        self._watchers: list[Watcher] = []
        self._remote = False
        self._closed = False
        #: Called with each local event while another node watches (``event_relay``).
        self.relay: Callable[[JobEvent], None] | None = None
        #: Called when the number of local watchers changes (the relay announces it).
        self.on_watchers: Callable[[int], None] | None = None
        #: Job id → µs time of its last progress event handed out, oldest first (``_ordered``).
        self._progress_at: dict[bytes, int] = {}

    # ------------------------------------------------------------ watchers

    def watch(self, job_ids: Collection[bytes] = (), queues: Collection[str] = (),
              job_types: Collection[str] = ()) -> Watcher:
        """A new watcher with these filters (empty = any), receiving from now on."""
        w = Watcher(job_ids, queues, job_types, self.buffer)
        if self._closed:
            w.closed = True
            w.wake.set()
            return w
        self._watchers = [*self._watchers, w]
        self._changed()
        return w

    def unwatch(self, watcher: Watcher) -> None:
        """Forget ``watcher`` (idempotent; call in a ``finally``)."""
        if watcher in self._watchers:
            self._watchers = [w for w in self._watchers if w is not watcher]
            self._changed()

    @property
    def watchers(self) -> int:
        """How many local watchers there are."""
        return len(self._watchers)

    @property
    def remote_watchers(self) -> bool:
        """Whether another node sharing the store has watchers (set by the relay)."""
        return self._remote

    @remote_watchers.setter
    def remote_watchers(self, value: bool) -> None:
        self._remote = value
        self.active = bool(self._watchers) or value

    def _changed(self) -> None:
        self.active = bool(self._watchers) or self._remote
        if self.on_watchers is not None:
            self.on_watchers(len(self._watchers))

    def close(self) -> None:
        """The server is stopping: every watcher's stream ends (UNAVAILABLE) and no new one
        receives anything. Idempotent."""
        self._closed = True
        for w in self._watchers:
            w.closed = True
            w.wake.set()
        self._watchers = []
        self._changed()

    # ------------------------------------------------------------ publishing

    def publish(self, event: JobEvent, *, local: bool = True) -> None:
        """Give ``event`` the next position and hand it to every watcher (and, for a
        ``local`` one while other nodes watch, to the relay)."""
        self.position += 1
        event = event._replace(position=self.position)
        if self._progress_at or event.kind == PROGRESS:
            event = self._ordered(event)
        for w in self._watchers:
            w.offer(event)
        if local and self._remote and self.relay is not None:
            self.relay(event)

    def _ordered(self, event: JobEvent) -> JobEvent:
        """``event`` at no earlier time than its job's last progress event (see "Times in
        order" in the class docstring): a progress event's time is remembered, any other kind
        ends the job's entry (a later progress event starts a new one)."""
        times = self._progress_at
        last = times.pop(event.job_id, None)
        if last is not None and last > event.at:
            event = event._replace(at=last)
        if event.kind == PROGRESS:
            times[event.job_id] = event.at
            if len(times) > MAX_PROGRESS_TIMES:
                del times[next(iter(times))]
        return event

    def emit(self, kind: int, job_id: bytes, queue: str, job_type: str, state: int, at: int, attempt: int,
             **extra: object) -> None:
        """Publish one local event (``extra``: the optional ``JobEvent`` fields)."""
        self.position += 1
        self._deliver(JobEvent(self.position, kind, job_id, queue, job_type, state, at, attempt, node=self.node,
                               **extra))  # type: ignore[arg-type]

    def _deliver(self, event: JobEvent) -> None:
        if self._progress_at or event.kind == PROGRESS:
            event = self._ordered(event)
        for w in self._watchers:
            w.offer(event)
        if self._remote and self.relay is not None:
            self.relay(event)

    def _deliver_all(self, events: list[JobEvent], relay_them: bool = True) -> None:
        """``_deliver`` each of ``events`` (in order): each watcher's selection as one list
        extension (``Watcher.select``, ``offer_all``). ``relay_them`` False: to this node's
        watchers only (events every node makes for itself)."""
        if not events:
            return
        if self._progress_at:  # some job's progress was handed out: its next event not earlier
            events = [self._ordered(e) for e in events]
        for w in self._watchers:
            w.offer_all(w.select(events))
        relay = self.relay
        if relay_them and self._remote and relay is not None:
            for event in events:
                relay(event)

    # ------------------------------------------------------------ the engine's emitters
    # The three of every job (enqueued, reserved, completed) build their tuples with
    # tuple.__new__ (the JobEvent fields in order): a busy watched node makes tens of
    # thousands a second.

    def enqueued(self, rows: Sequence[JobRow], dedups: Dedups) -> None:
        """An enqueue commit stored ``rows`` (all but the ``dedups`` indexes)."""
        node, pos = self.node, self.position
        if dedups:
            rows = [row for i, row in enumerate(rows) if i not in dedups]
        batch = [_new(JobEvent, (pos + k, ENQUEUED, row[0], row[1], row[2], row[3], row[6], 0, "", row[5], "", "", "",
                                 0, node)) for k, row in enumerate(rows, 1)]
        self.position = pos + len(batch)
        self._deliver_all(batch)

    def sql_enqueued(self, jobs: Iterable[tuple[bytes, str, str, int, int]]) -> None:
        """Jobs an enqueue through the SQL functions stored, as this node read them: (job id,
        queue, job type, run_at µs, enqueued_at µs) each. Each is an ``enqueued`` event at
        its ``enqueued_at``, SCHEDULED when its run_at is later, named with no node (none
        made it), for this node's watchers only: every node hears of them itself."""
        pos = self.position
        batch = [_new(JobEvent, (pos + k, ENQUEUED, job_id, queue, job_type,
                                 _SCHEDULED if run_at > at else _READY, at, 0, "", run_at, "", "", "", 0, ""))
                 for k, (job_id, queue, job_type, run_at, at) in enumerate(jobs, 1)]
        self.position = pos + len(batch)
        self._deliver_all(batch, relay_them=False)

    def reserved(self, jobs: Iterable[JobRecord], worker_id: str) -> None:
        """A reserve leased ``jobs`` to ``worker_id``."""
        node, pos = self.node, self.position
        batch = [_new(JobEvent, (pos + k, RESERVED, j[0], j[1], j[2], _RESERVED, j[16] or 0, j[7], worker_id, 0, "",
                                 "", "", 0, node)) for k, j in enumerate(jobs, 1)]
        self.position = pos + len(batch)
        self._deliver_all(batch)

    def settled(self, items: Sequence[SettleParams], results: Sequence[SettleResult]) -> None:
        """A settle call's items and their verdicts (refused ones and repeated acks report nothing)."""
        node = self.node
        if all(r[0] is not None or r[1] == _COMPLETED for r in results):
            # Acks only (the busy case): the completions in one comprehension.
            pos = self.position
            batch = [_new(JobEvent, (pos + k, COMPLETED, p[0], r[4], r[6], _COMPLETED, p[3], r[3], "", 0, "", "", "",
                                     len(p[9]) if p[9] else 0, node))
                     for k, (p, r) in enumerate([(p, r) for p, r in zip(items, results, strict=True)
                                                 if r[0] is None and r[2]], 1)]
            self.position = pos + len(batch)
            self._deliver_all(batch)
            return
        emit = self.emit
        done: list[JobEvent] = []
        for p, r in zip(items, results, strict=True):
            error, state, run_at, attempt, queue, _started, job_type = r
            if error is not None:
                continue
            if state == _COMPLETED:
                if run_at:  # run_at 0: a repeated ack
                    self.position = pos = self.position + 1
                    result = p[9]  # SettleParams.result: bytes or None
                    done.append(_new(JobEvent, (pos, COMPLETED, p[0], queue, job_type, state, p[3], attempt, "", 0, "",
                                                "", "", len(result) if result else 0, node)))
                continue
            if done:  # the completions so far first: the events stay in position order
                self._deliver_all(done)
                done = []
            if state == _DEAD:
                reason = ATTEMPTS_EXHAUSTED if p.kind is not _DEAD_LETTER else p.reason
                emit(DEAD_LETTERED, p.job_id, queue, job_type, state, p.now, attempt, reason=reason,
                     error=p.error_message)
            elif state == _CANCELLED:
                emit(CANCELLED, p.job_id, queue, job_type, state, p.now, attempt, error=p.error_message,
                     reason=CANCELLED_WHILE_RESERVED)
            elif p.kind is _RELEASE:
                emit(REQUEUED, p.job_id, queue, job_type, state, p.now, attempt, reason="released", run_at=run_at)
            else:
                emit(RETRY_SCHEDULED, p.job_id, queue, job_type, state, p.now, attempt, run_at=run_at,
                     error=p.error_message)
        self._deliver_all(done)

    def progressed(self, job_id: bytes, queue: str, job_type: str, attempt: int, progress: str,
                   at: int | None = None) -> None:
        """A running handler's progress was stored; ``at``: when the server received the
        extension that carried it (µs UTC, as a settle's time is), None = now."""
        self.emit(PROGRESS, job_id, queue, job_type, _RESERVED, self.clock.now() if at is None else at, attempt,
                  progress=progress)

    def promoted(self, jobs: Iterable[tuple[bytes, str, str, int, int]], now: int) -> None:
        """A promotion sweep made ``jobs`` READY: (job id, queue, job type, attempt, run_at) each."""
        emit = self.emit
        for job_id, queue, job_type, attempt, run_at in jobs:
            emit(PROMOTED, job_id, queue, job_type, _READY, now, attempt, run_at=run_at)

    def redriven(self, jobs: Iterable[tuple[bytes, str, str]], now: int) -> None:
        """A bulk redrive requeued DEAD_LETTERED ``jobs`` (job id, queue, job type each) at
        ``now`` (µs UTC): READY, attempt 0, run_at ``now`` (``transitions.redrive``), reason
        ``requeued`` like a single requeue."""
        emit = self.emit
        for job_id, queue, job_type in jobs:
            emit(REQUEUED, job_id, queue, job_type, _READY, now, 0, reason="requeued", run_at=now)

    def reclaimed(self, jobs: Iterable[tuple[bytes, str, str, int, int]], now: int) -> None:
        """A reclaim pass took back expired leases: (job id, queue, job type, new state,
        attempt) each — READY (requeued, ``lease_expired``), DEAD_LETTERED (``LEASE_EXPIRED``)
        or CANCELLED."""
        emit = self.emit
        for job_id, queue, job_type, state, attempt in jobs:
            if state == _READY:
                emit(REQUEUED, job_id, queue, job_type, state, now, attempt, reason="lease_expired")
            elif state == _DEAD:
                emit(DEAD_LETTERED, job_id, queue, job_type, state, now, attempt, reason=LEASE_EXPIRED)
            else:
                emit(CANCELLED, job_id, queue, job_type, state, now, attempt,
                     reason=CANCELLED_WHILE_RESERVED)

__all__ = ["CANCELLED", "COMPLETED", "DEAD_LETTERED", "DEFAULT_WATCH_BUFFER", "ENQUEUED", "MAX_PROGRESS_TIMES",
           "MAX_WATCH_IDS", "MAX_WATCH_NAMES", "PROGRESS", "PROMOTED", "REQUEUED", "RESERVED", "RETRY_SCHEDULED",
           "JobEvent", "JobEvents", "Watcher"]
