"""The workers this node sees, counted in memory.

Every ``Reserve`` says who calls (``worker_id``) and, from current clients, its host, handler
slots and client version (``JobEngine.reserve`` notes it when it accepts the call, before a long
poll waits, and again when the call ends); every ``Settle`` / ``Ack`` / ``Nack`` / ``ExtendLease`` that names
its ``worker_id`` moves the worker's last call on and counts its jobs done. Nothing of this
is written per call: the node reports its workers to the store with each heartbeat
(``Store.report_workers``, ``sepp.server.cluster``), so every node's Workers page sees the
whole cluster within a heartbeat (5 s) — the same bound as the node list.

A clean stop is recorded: the ``Worker`` runtime's last call, once its handlers ended and its
acks were answered, is ``StopReserving`` with ``stopped`` set (``JobEngine.stop_reserving``),
which notes ``stopped_at`` — also on a node that never saw the worker reserve (a worker
behind a load balancer), as an entry the listing merges with the worker's other rows. The
next Reserve that *starts* ends it; the end of a long poll that began before the stop does
not (it belongs to the session that ended), nor do other calls. A worker killed without
stopping is never marked: it goes quiet as before.

Bounds (a worker id is caller input, found by attacking it): at most ``MAX_WORKERS``
workers are tracked (a new one beyond that is not, and a warning is logged once), only ids of at
most ``MAX_ID`` characters (kept whole, so the in-flight count matches the jobs' worker id),
``MAX_QUEUES`` queue names and ``MAX_TEXT`` characters of every other text; each is forgotten
after ``FORGET_AFTER`` seconds without a call; the done counts keep 60 one-second buckets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sepp.domain.clock import Clock
from sepp.domain.records import WorkerRecord

log = logging.getLogger("sepp.workers")

#: Most workers one node tracks at once.
MAX_WORKERS = 1_000
#: Seconds without a call after which a worker is forgotten (the Workers page lists the last hour).
FORGET_AFTER = 3600.0
#: Longest host / client_version / queue name kept, in characters (longer is cut).
MAX_TEXT = 200
#: Longest worker id tracked, in characters (a longer one is not tracked: cutting it would
#: merge workers and lose their in-flight count).
MAX_ID = 1024
#: Most queue names kept of one Reserve.
MAX_QUEUES = 16

_US = 1_000_000


@dataclass(slots=True)
class _Live:
    host: str
    queues: tuple[str, ...]
    concurrency: int
    client_version: str
    first_seen: int
    last_reserve: int
    last_seen: int
    #: When its final ``StopReserving`` came (µs UTC), 0 while it runs.
    stopped_at: int = 0
    #: Jobs completed / failed per second (second since the epoch → counts), the last minute.
    done: dict[int, list[int]] = field(default_factory=dict)


class WorkerRegistry:
    """This node's workers, by ``worker_id`` (see the module docstring). ``clock`` gives now."""

    def __init__(self, clock: Clock) -> None:
        self._now = clock.now
        self._workers: dict[str, _Live] = {}
        self._full_warned = False

    def __len__(self) -> int:
        return len(self._workers)

    def _get(self, worker_id: str, now: int, reserving: bool = False) -> _Live | None:
        live = self._workers.get(worker_id)
        if live is not None:
            return live
        if len(self._workers) >= MAX_WORKERS:
            self.forget_idle(now)
            if len(self._workers) >= MAX_WORKERS and reserving:
                # A stop noted for an id never seen reserving here is listed nowhere: a
                # reserving worker takes the slot of the oldest such entry (so ids sent only
                # in StopReserving cannot keep real workers off the page for an hour).
                ghosts = [(w.last_seen, i) for i, w in self._workers.items() if not w.last_reserve]
                if ghosts:
                    del self._workers[min(ghosts)[1]]
            if len(self._workers) >= MAX_WORKERS:
                if not self._full_warned:
                    self._full_warned = True
                    log.warning("tracking %d workers already: further worker ids are not shown on the Workers "
                                "page until some go idle for %.0f s", MAX_WORKERS, FORGET_AFTER)
                return None
        live = self._workers[worker_id] = _Live("", (), 0, "", now, 0, now)
        return live

    def reserved(self, worker_id: str, host: str, queues: Sequence[str], concurrency: int,
                 client_version: str, began: int = 0) -> int:
        """A ``Reserve`` from ``worker_id`` (ignored when empty): what it said replaces what it
        said before (``host`` / ``client_version`` "" and ``concurrency`` ≤ 0 keep the old),
        and a recorded stop ends. ``began`` is, for the note at a call's end, what the note at
        its start returned: a call that began before the worker stopped notes nothing at its
        end. Returns the time noted (µs UTC), 0 when nothing was."""
        if not worker_id or len(worker_id) > MAX_ID:
            return 0
        now = self._now()
        live = self._get(worker_id, now, reserving=True)
        if live is None:
            return 0
        if began and live.stopped_at >= began:
            return 0  # the end of a call of the session that stopped since
        live.stopped_at = 0
        live.last_reserve = live.last_seen = now
        live.queues = tuple(_clean(q) for q in queues[:MAX_QUEUES])
        if host:
            live.host = _clean(host)
        if concurrency > 0:
            live.concurrency = concurrency
        if client_version:
            live.client_version = _clean(client_version)
        return now

    def stopped(self, worker_id: str) -> None:
        """``worker_id`` stopped cleanly (its final ``StopReserving``): listed as stopped from
        now until its next Reserve. Noted on a node that never saw it reserve too (an entry
        with no Reserve, which the listing merges with its other nodes' rows); ignored for an
        id the registry would not track or with a NUL (the store's text cannot hold it)."""
        if not worker_id or len(worker_id) > MAX_ID or "\x00" in worker_id:
            return
        now = self._now()
        live = self._get(worker_id, now)
        if live is None:
            return
        live.stopped_at = live.last_seen = now

    def called(self, worker_id: str, completed: int = 0, failed: int = 0) -> None:
        """Any other call of ``worker_id`` (ignored when empty or never seen reserving):
        ``completed`` / ``failed`` jobs it settled with it."""
        if not worker_id:
            return
        live = self._workers.get(worker_id)
        if live is None:
            return
        now = self._now()
        live.last_seen = now
        if completed or failed:
            second = now // _US
            bucket = live.done.get(second)
            if bucket is None:
                if len(live.done) >= 61:
                    _drop_old(live.done, second)
                bucket = live.done[second] = [0, 0]
            bucket[0] += completed
            bucket[1] += failed

    def forget_idle(self, now: int) -> None:
        """Forget the workers without a call for ``FORGET_AFTER`` seconds."""
        cutoff = now - int(FORGET_AFTER * _US)
        for worker_id in [w for w, live in self._workers.items() if live.last_seen < cutoff]:
            del self._workers[worker_id]

    def snapshot(self, node: str) -> list[WorkerRecord]:
        """Every tracked worker as this node's ``WorkerRecord`` (counts over the last 60 s),
        forgetting the idle ones first."""
        now = self._now()
        self.forget_idle(now)
        second = now // _US
        out = []
        for worker_id, live in self._workers.items():
            _drop_old(live.done, second)
            completed = sum(b[0] for b in live.done.values())
            failed = sum(b[1] for b in live.done.values())
            out.append(WorkerRecord(worker_id, node, live.host, live.queues, live.concurrency, live.client_version,
                                    live.first_seen, live.last_reserve, live.last_seen, completed, failed,
                                    live.stopped_at))
        return out


def last_reserves(rows: Iterable[WorkerRecord]) -> dict[str, int]:
    """Queue → the latest Reserve of it (µs UTC) among the worker ``rows`` (every node's):
    what the "no consumer" signal is judged by."""
    last: dict[str, int] = {}
    for row in rows:
        for queue in row.queues:
            if row.last_reserve > last.get(queue, 0):
                last[queue] = row.last_reserve
    return last


def _clean(text: str) -> str:
    """Caller text as kept: cut to ``MAX_TEXT`` characters, NUL as U+FFFD (PostgreSQL text
    cannot hold it; the row would fail the node's whole report)."""
    return text[:MAX_TEXT].replace("\x00", "\ufffd")


def _drop_old(done: dict[int, list[int]], second: int) -> None:
    for s in [s for s in done if s <= second - 60]:
        del done[s]
