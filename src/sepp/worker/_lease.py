"""Automatic lease extension for jobs a worker holds (running or prefetched).

Each held job gets a timer at one third of its lease (the jobs of one reservation with
the same lease length share one first timer: ``track_all``); when it fires, ``ExtendLease``
pushes the expiry out by one whole lease again, so two thirds of a lease of slack
absorb a slow call or a short server restart. An extension also reports an admin's
cancel request (``Job.cancel_requested``). A refused extension (LEASE_MISMATCH /
LEASE_EXPIRED) marks the job ``lease_lost`` and stops extending it; a transport
error retries sooner.

The lease length is the worker's ``lease_duration`` when set; otherwise it is
estimated from the first reservation as ``lease_expires_at − local wall clock``
(exact on one host; set ``lease_duration`` explicitly when clocks may drift).

Progress (``Job.set_progress``) rides the same call: an ``ExtendLease`` carrying the latest
value, sent at once for a job's first value and then at most once per ``progress_every``
seconds (``ProgressGate``): the values set in between are coalesced, the latest sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.errors import SeppError
from sepp.worker._progress import PROGRESS_EVERY, ProgressGate
from sepp.worker._rpc import WorkerRpc
from sepp.worker.errors import LeaseError
from sepp.worker.job import Job, timestamp_to_datetime

log = logging.getLogger("sepp.worker")

#: Shortest lease length the keeper assumes, seconds (guards against clock skew).
MIN_LEASE = 0.05


@dataclass(slots=True)
class _Batch:
    """Jobs reserved together whose first extension is one timer; cancelled when the last
    of them is untracked before it fires. Until it fires, each of its jobs is held by the
    batch itself (no object per job); then each gets a ``_Held`` of its own."""

    jobs: list[Job]
    live: int
    length: float
    handle: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class _Held:
    length: float
    handle: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None


class LeaseKeeper:
    """Keeps the leases of tracked jobs alive until ``untrack``.

    ``on_lost(job, error)`` is called once when an extension is refused. ``clock``'s wall
    time estimates a lease's length when ``lease_duration`` is ``None``; the extension
    timers run on the event loop's clock.
    """

    def __init__(self, rpc: WorkerRpc, lease_duration: float | None,
                 on_lost: Callable[[Job, LeaseError], None] | None = None, *, clock: Clock = SYSTEM_CLOCK,
                 progress_every: float = PROGRESS_EVERY) -> None:
        self._rpc = rpc
        self._clock = clock
        self._lease = lease_duration
        self._on_lost = on_lost
        self._held: dict[Job, _Held | _Batch] = {}
        #: The progress gates of held jobs that reported progress.
        self._gates: dict[Job, ProgressGate] = {}
        self._progress_every = progress_every
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Extensions sent (metrics, tests); ``progress_sent``: those carrying progress.
        self.extensions = 0
        self.progress_sent = 0

    def lease_length(self, job: Job) -> float:
        """The lease length assumed for ``job``, seconds."""
        if self._lease is not None:
            return self._lease
        remaining = job.lease_expires_at.timestamp() - self._clock.now() / 1_000_000
        return max(MIN_LEASE, remaining)

    def track(self, job: Job) -> None:
        """Start keeping ``job``'s lease alive (call right after it was reserved)."""
        self._loop = asyncio.get_running_loop()
        held = _Held(self.lease_length(job))
        self._held[job] = held
        self._schedule(job, held, held.length / 3)

    def track_all(self, jobs: list[Job]) -> None:
        """``track`` every job of one reservation; jobs with the same lease share one timer
        for their first extension (one timer per batch instead of per job). Without a
        ``lease_duration`` the jobs that expire at the same instant (all of one reservation
        from one queue, as a rule) share it, with the length estimated once."""
        if len(jobs) < 2:
            for job in jobs:
                self.track(job)
            return
        if self._lease is not None:
            self._track_batch(jobs, self._lease)
            return
        first = jobs[0].reservation.lease_expires_at
        for job in jobs:  # as a rule they all expire together: one comparison each, no grouping
            if job.reservation.lease_expires_at != first:
                break
        else:
            self._track_batch(jobs, self.lease_length(jobs[0]))
            return
        groups: dict[tuple[int, int], list[Job]] = {}
        for job in jobs:
            expires = job.reservation.lease_expires_at
            groups.setdefault((expires.seconds, expires.nanos), []).append(job)
        for group in groups.values():
            self._track_batch(group, self.lease_length(group[0]))

    def _track_batch(self, jobs: list[Job], length: float) -> None:
        batch = _Batch(jobs, len(jobs), length)
        self._held.update(dict.fromkeys(jobs, batch))
        self._loop = loop = asyncio.get_running_loop()
        batch.handle = loop.call_later(length / 3, self._fire_batch, batch)

    def untrack(self, job: Job) -> None:
        """Stop extending ``job`` (it finished or was given back). Idempotent."""
        held = self._held.pop(job, None)
        if held is None:
            return
        if self._gates:
            gate = self._gates.pop(job, None)
            if gate is not None:
                gate.cancel()
        if held.handle is not None:
            if type(held) is _Batch:  # one of a batch whose first extension is still to come
                held.live -= 1
                if held.live:
                    return
                held.jobs = []
            held.handle.cancel()
            held.handle = None

    def _fire_batch(self, batch: _Batch) -> None:
        jobs, batch.jobs, batch.handle = batch.jobs, [], None
        held = self._held
        for job in jobs:
            if held.get(job) is batch:
                held[job] = _Held(batch.length)
                self._fire(job)

    def __len__(self) -> int:
        return len(self._held)

    def _schedule(self, job: Job, held: _Held, delay: float) -> None:
        loop = asyncio.get_running_loop()
        held.handle = loop.call_later(delay, self._fire, job)

    def _fire(self, job: Job) -> None:
        held = self._held.get(job)
        if not isinstance(held, _Held):
            return
        held.handle = None
        held.task = asyncio.create_task(self._extend(job, held), name=f"sepp-extend-{job.id}")

    def _lost(self, job: Job, exc: LeaseError) -> None:
        """An extension of ``job`` was refused: stop keeping it, mark it, tell ``on_lost``."""
        if self._held.pop(job, None) is None:
            return  # finished meanwhile: the refusal is expected
        gate = self._gates.pop(job, None)
        if gate is not None:
            gate.cancel()
        job.lease_lost = True
        log.warning("lease of job %s lost (%s): it may be delivered again", job.id, exc.reason)
        if self._on_lost is not None:
            self._on_lost(job, exc)

    # -------------------------------------------------------------- progress

    def progress(self, job: Job) -> None:
        """``job`` has a new progress value (``Job.set_progress``; any thread): send it now
        when none was sent in the last ``progress_every`` seconds, else once that much time
        has passed since the last (then with whatever value is latest)."""
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._progress_due(job)
            return
        with contextlib.suppress(RuntimeError):  # the worker's loop is closed: it stopped
            loop.call_soon_threadsafe(self._progress_due, job)

    def _progress_due(self, job: Job) -> None:
        if job not in self._held:
            return  # settled or given back: its progress is not sent
        gate = self._gates.get(job)
        if gate is None:
            gate = self._gates[job] = ProgressGate(self._clock, self._progress_every)
        if gate.timer is not None:
            return  # a send is scheduled: it takes the latest value
        wait = gate.due_in()
        if wait > 0:
            gate.timer = asyncio.get_running_loop().call_later(wait, self._progress_fire, job, gate)
        else:
            self._progress_fire(job, gate)

    def _progress_fire(self, job: Job, gate: ProgressGate) -> None:
        gate.timer = None
        if self._gates.get(job) is not gate:
            return
        text = gate.take(job.progress)
        if text is not None:
            gate.task = asyncio.create_task(self._send_progress(job, text), name=f"sepp-progress-{job.id}")

    async def _send_progress(self, job: Job, text: str) -> None:
        held = self._held.get(job)
        if held is None:
            return
        length = held.length
        self.extensions += 1
        self.progress_sent += 1
        try:
            resp = await self._rpc.extend(job.id, job.lease_id, length, progress=text)
        except LeaseError as exc:
            self._lost(job, exc)
            return
        except SeppError as exc:  # the next value (or this one again) goes with a later call
            log.warning("progress of job %s not sent (%s)", job.id, exc)
            gate = self._gates.get(job)
            if gate is not None:
                gate.forget(text)
            return
        if resp.cancel_requested:
            job.cancel_requested = True
        job.lease_expires_at = timestamp_to_datetime(resp.lease_expires_at)

    # -------------------------------------------------------------- extensions

    async def _extend(self, job: Job, held: _Held) -> None:
        self.extensions += 1
        try:
            resp = await self._rpc.extend(job.id, job.lease_id, held.length)
        except LeaseError as exc:
            self._lost(job, exc)
            return
        except SeppError as exc:
            if job in self._held:
                retry = max(MIN_LEASE / 2, min(held.length / 6, 1.0))
                log.warning("extending the lease of job %s failed (%s); retrying in %.2fs",
                            job.id, exc, retry)
                self._schedule(job, held, retry)
            return
        if resp.cancel_requested:
            job.cancel_requested = True
        job.lease_expires_at = timestamp_to_datetime(resp.lease_expires_at)
        if self._held.get(job) is held:
            self._schedule(job, held, held.length / 3)

    async def close(self) -> None:
        """Stop every timer and wait for extensions in flight."""
        held = list(self._held.values())
        self._held.clear()
        tasks = []
        for gate in self._gates.values():
            gate.cancel()
            if gate.task is not None and not gate.task.done():
                tasks.append(gate.task)
        self._gates.clear()
        for h in held:
            if h.handle is not None:
                h.handle.cancel()
                h.handle = None
            if isinstance(h, _Held) and h.task is not None and not h.task.done():
                tasks.append(h.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["LeaseKeeper"]
