"""Waiting for jobs to finish (``WaitJobs``): a long-poll answered from the stored state.

A wait registers its ids, then reads their stored state, then parks (register → read → park),
and reads again each time it is woken — so a job that finishes between a read and the park
still wakes it: no wake-up is lost. It is woken by every way a job finishes or goes:

* acks and nacks (``events.settled``: each item whose result is COMPLETED, DEAD_LETTERED or
  CANCELLED), a reclaim pass's dead letters and cancels (``events.reclaimed``, by queue: the
  pass does not name the jobs), an admin cancel or delete, a damaged row buried, a queue
  purged or deleted (``events.ended``);
* another node's news (PostgreSQL): this node tells the others when callers wait on it
  (``Store.waiting``, again every ``ANNOUNCE_EVERY`` s while any waits), and a node that
  heard it tells the ids of the jobs it finished (``Store.finished``; ``Store.on_finished``
  here). News that may have been missed (the listener reconnected) wakes every wait.

Correctness never rests on a wake-up: on a shared store a parked wait also reads again
``FIRST_RECHECK`` s after its first read and every ``RECHECK_EVERY`` s after that (news from
another node can be late or lost: a node that began waiting a moment ago is not known to
the others yet). The wait itself runs in real time on the event loop; nothing here reads
the clock. Errors: ``InvalidRequest`` (no ids, more than ``MAX_WAIT_JOBS``, an id that is
not a UUID, a negative timeout) and ``NotFound`` (JOB_NOT_FOUND, metadata ``job_id``: the
first id of no stored job, checked on every read — a job deleted while waited for too).

An id that is no job but a workflow's waits for the whole workflow (``workflow_waits``: its
nodes read once, then waited for by id; answered when every node is finished).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.domain.outcomes import FINISHED_STATES, JobOutcome
from sepp.domain.params import SettleParams, SettleResult
from sepp.domain.workflows import WorkflowNode
from sepp.hard_limits import MAX_WAIT_JOBS, KiB
from sepp.quoting import clip
from sepp.rejections import Reason
from sepp.server.errors import InvalidRequest, NotFound
from sepp.server.parts import EngineService, ServerParts
from sepp.server.workflow_waits import expand, node_outcomes, workflow_outcome

#: Seconds after its first read a parked wait on a shared store reads again, then every
#: ``RECHECK_EVERY`` seconds (news from other nodes can be late or lost).
FIRST_RECHECK = 0.25
RECHECK_EVERY = 2.0
#: Seconds between this node's "callers wait here" notices while any wait is parked.
ANNOUNCE_EVERY = 5.0
#: Room left in an answer for everything but the outcomes, bytes.
_ANSWER_SLACK = 64 * KiB

_K = TypeVar("_K", bytes, str)


class _Waiter:
    """One ``wait_jobs`` call in progress: its ids, the queues of its unfinished jobs (as
    last read: what a wake-up by queue finds it by), the event it parks on, and whether the
    server's stop ended it."""

    __slots__ = ("event", "ids", "node_ids", "parked", "queues", "stopped", "workflows")

    def __init__(self, ids: Sequence[bytes]) -> None:
        self.ids = ids
        #: The ids among ``ids`` that are workflows' → their nodes (``workflow_waits``), and
        #: those nodes' ids, waited for by id as well.
        self.workflows: dict[bytes, list[WorkflowNode]] = {}
        self.node_ids: list[bytes] = []
        self.queues: frozenset[str] = frozenset()
        self.event = asyncio.Event()
        self.parked = False
        self.stopped = False


def _forget(index: dict[_K, set[_Waiter]], keys: Iterable[_K], me: _Waiter) -> None:
    """Take ``me`` out of ``index``'s sets under ``keys``, dropping a set it leaves empty."""
    for key in keys:
        waiters = index.get(key)
        if waiters is not None:
            waiters.discard(me)
            if not waiters:
                del index[key]


class Waiting(EngineService):
    """``wait_jobs`` over the parts' store, woken by the parts' events and the store's news
    from other nodes (see the module docstring)."""

    def __init__(self, parts: ServerParts) -> None:
        super().__init__(parts)
        self._shared = parts.store.shared
        self._by_id: dict[bytes, set[_Waiter]] = {}
        self._by_queue: dict[str, set[_Waiter]] = {}
        self._all: set[_Waiter] = set()
        #: Set by ``end_waits``: no wait parks any more (the server is stopping).
        self._no_waits = False
        #: Loop time of this node's last "callers wait here" notice (``Store.waiting``).
        self._announced = float("-inf")
        parts.events.settled.subscribe(self._settled)
        parts.events.reclaimed.subscribe(self._reclaimed)
        parts.events.ended.subscribe(self._ended)
        parts.store.on_finished(self._heard)

    # ------------------------------------------------------------------ the wait

    async def wait_jobs(self, job_ids: Sequence[str], timeout_s: float) -> list[JobOutcome]:
        """The outcomes of the finished jobs among ``job_ids`` (canonical UUID text), in
        request order, as soon as at least one is finished; ``[]`` when none finished within
        ``timeout_s`` seconds (at most ``limits.max_wait_seconds``: a longer timeout waits
        that long) or when the server began stopping. When their outcomes would not fit one
        answer (``limits.max_message_bytes``) only the first ones that do are returned (at
        least one); the others are answered at once by the next call.

        Raises ``InvalidRequest`` (field ``job_ids`` or ``timeout``) and ``NotFound``
        (JOB_NOT_FOUND, metadata ``job_id``): see the module docstring.
        """
        ids = self._parse(job_ids)
        if timeout_s < 0:
            raise InvalidRequest(f"timeout must not be negative (got {timeout_s:g} s)", "timeout", 0, timeout_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(timeout_s, self.limits.max_wait_seconds)
        me = self._register(ids)
        try:
            recheck = FIRST_RECHECK
            while True:
                me.event.clear()  # before the read, never after: a wake-up during it ends the park
                rows = {row.id: row for row in await self.store.job_outcomes(ids)}
                if len(rows) < len(ids):  # ids of no job: workflows' ids, or unknown (a plain wait never gets here)
                    rows = await self._workflows(me, ids, rows)
                done = self._answer(ids, rows)
                if done:
                    return done
                self._index_queues(me, {row.queue for row in rows.values()})
                remaining = deadline - loop.time()
                if remaining <= 0 or me.stopped or self._no_waits:
                    return []
                self._announce(loop.time())
                park = min(remaining, recheck) if self._shared else remaining
                me.parked = True
                try:
                    await asyncio.wait_for(me.event.wait(), park)
                except TimeoutError:
                    recheck = RECHECK_EVERY
                finally:
                    me.parked = False
        finally:
            self._unregister(me)

    async def _workflows(self, me: _Waiter, ids: Sequence[bytes],
                         rows: dict[bytes, JobOutcome]) -> dict[bytes, JobOutcome]:
        """``rows`` with the outcome of each id of ``ids`` that is a workflow's
        (``workflow_waits.workflow_outcome``); the workflows' nodes are read once per wait and
        then waited for by id too."""
        me.workflows = await expand(self.store, [raw for raw in ids if raw not in rows], me.workflows)
        if not me.workflows:
            return rows
        if not me.node_ids:
            me.node_ids = [n.id for nodes in me.workflows.values() for n in nodes]
            for raw in me.node_ids:
                self._by_id.setdefault(raw, set()).add(me)
        found = await node_outcomes(self.store, me.workflows)
        out = dict(rows)
        for wf, nodes in me.workflows.items():
            out[wf] = workflow_outcome(wf, nodes, found)
        return out

    def _parse(self, job_ids: Sequence[str]) -> list[bytes]:
        if not job_ids:
            raise InvalidRequest("WaitJobs needs at least one job id", "job_ids", 1, 0)
        if len(job_ids) > MAX_WAIT_JOBS:
            raise InvalidRequest(f"WaitJobs takes at most {MAX_WAIT_JOBS} job ids (got {len(job_ids)})", "job_ids",
                                 MAX_WAIT_JOBS, len(job_ids))
        ids: list[bytes] = []
        for i, text in enumerate(job_ids):
            raw = job_id_bytes(text)
            if raw is None:
                raise InvalidRequest(f"job_ids[{i}] {clip(repr(text), 64)} is not a UUID", f"job_ids[{i}]")
            ids.append(raw)
        return list(dict.fromkeys(ids))

    def _answer(self, ids: Sequence[bytes], rows: Mapping[bytes, JobOutcome]) -> list[JobOutcome]:
        """The finished jobs' outcomes in request order, as many as fit one answer (at
        least one); ``NotFound`` for the first id of no stored job."""
        for raw in ids:
            if raw not in rows:
                text = job_id_text(raw)
                raise NotFound(f"job {text} does not exist (never enqueued, or deleted: a finished job is kept "
                               "for its queue's retention)", Reason.JOB_NOT_FOUND, {"job_id": text})
        budget = max(self.limits.max_message_bytes - _ANSWER_SLACK, 1)
        done: list[JobOutcome] = []
        for raw in ids:
            row = rows[raw]
            if row.state in FINISHED_STATES:
                budget -= row.size()
                if done and budget < 0:
                    break
                done.append(row)
        return done

    # ------------------------------------------------------------------ who waits

    def _register(self, ids: Sequence[bytes]) -> _Waiter:
        me = _Waiter(ids)
        self._all.add(me)
        for raw in ids:
            self._by_id.setdefault(raw, set()).add(me)
        return me

    def _index_queues(self, me: _Waiter, queues: Iterable[str]) -> None:
        names = frozenset(queues)
        if names == me.queues:
            return
        self._drop_queues(me)
        me.queues = names
        for name in names:
            self._by_queue.setdefault(name, set()).add(me)

    def _drop_queues(self, me: _Waiter) -> None:
        _forget(self._by_queue, me.queues, me)

    def _unregister(self, me: _Waiter) -> None:
        self._all.discard(me)
        self._drop_queues(me)
        _forget(self._by_id, me.ids, me)
        _forget(self._by_id, me.node_ids, me)

    def _announce(self, now: float) -> None:
        """Tell the other nodes that callers wait here, at most every ``ANNOUNCE_EVERY`` s."""
        if self._shared and now - self._announced >= ANNOUNCE_EVERY:
            self._announced = now
            self.store.waiting()

    def waiting(self) -> int:
        """How many ``wait_jobs`` calls are parked right now (tests and diagnostics)."""
        return sum(1 for me in self._all if me.parked)

    def end_waits(self) -> int:
        """The server is stopping: every parked wait answers ``[]`` now (the client asks
        again, of the next server) and no later one parks. Returns how many it woke."""
        self._no_waits = True
        woken = 0
        for me in self._all:
            if not me.stopped:
                me.stopped = True
                me.event.set()
                woken += 1
        return woken

    # ------------------------------------------------------------------ wake-ups

    def _wake(self, ids: Iterable[bytes], queues: Iterable[str] = ()) -> None:
        by_id, by_queue = self._by_id, self._by_queue
        for raw in ids:
            for me in by_id.get(raw, ()):
                me.event.set()
        for name in queues:
            for me in by_queue.get(name, ()):
                me.event.set()

    def _settled(self, items: Sequence[SettleParams], results: Sequence[SettleResult]) -> None:
        """A settle committed: wake the waits of the jobs it finished, tell the other nodes."""
        tell = self.store.others_waiting
        if not self._by_id and not tell:
            return
        ids = [item.job_id for item, result in zip(items, results, strict=True)
               if result.error is None and result.state in FINISHED_STATES]
        if ids:
            self._wake(ids)
            if tell:
                self.store.finished(ids, ())

    def _reclaimed(self, counts: Mapping[tuple[str, str, int], int]) -> None:
        """A reclaim pass dead-lettered or cancelled jobs of these queues (ids not known)."""
        queues = sorted({queue for (queue, _type, state) in counts if state in FINISHED_STATES})
        if queues:
            self._wake((), queues)
            self.store.finished((), queues)

    def _ended(self, job_ids: Sequence[bytes], queues: Sequence[str]) -> None:
        """An admin cancel or delete, a buried row, a purged or deleted queue."""
        self._wake(job_ids, queues)
        self.store.finished(job_ids, queues)

    def _heard(self, job_ids: Sequence[bytes] | None, queues: Sequence[str]) -> None:
        """Another node's news: jobs finished there (``None``: news may have been lost)."""
        if job_ids is None:
            for me in self._all:
                me.event.set()
            return
        self._wake(job_ids, queues)


__all__ = ["ANNOUNCE_EVERY", "FIRST_RECHECK", "RECHECK_EVERY", "Waiting"]
