"""Finished jobs and waiting nodes across PostgreSQL nodes: what lets a ``WaitJobs`` on one
node answer within milliseconds when the job finishes on another.

A node with callers waiting for jobs says so (``waiting``: one NOTIFY ``{"o": origin, "w": 1}``,
repeated by the engine every few seconds while any waits). A node that heard it within
``WAITING_TTL`` seconds is ``others_waiting``: then it tells the ids of the jobs it saw finish
(``finished``: ``{"o": origin, "f": [hex ids], "fq": [queues]}``; queues where it knows no ids,
a reclaim pass's dead letters) — batched, on the read pool, after the commits that finished
them, never in their transaction. A node nobody waits on sends nothing, so the ack path costs
what it did. Each node hands what it hears to its engine (``subscribe``); after the listener
connection was made again (notifications may have been lost) the callbacks get ``None``: every
waiter reads the stored state again. Correctness never depends on a notification: every wait
also re-reads the stored state on its own every few seconds (``sepp.server.waiting``;
docs/decisions.md "Waiting for jobs").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sepp.storage.errors import StoreError
from sepp.storage.postgres.listener import Listener
from sepp.storage.postgres.reads import PgReads
from sepp.storage.postgres.sql import Q

log = logging.getLogger("sepp.storage.postgres")

#: Seconds a node counts another as waiting after hearing it say so (it says so again every
#: few seconds while it waits: ``sepp.server.waiting.ANNOUNCE_EVERY``).
WAITING_TTL = 20.0
#: Job ids per notification (NOTIFY payloads are at most 8,000 bytes; an id is 35 in JSON).
IDS_PER_NOTICE = 200

#: What a subscriber gets: the finished jobs' 16-byte ids (None: any may have finished, look
#: again) and the queues where jobs finished whose ids were not sent.
Finished = Callable[[Sequence[bytes] | None, Sequence[str]], None]


class FinishedNotices:
    """The notifications of the module docstring for one store: sends on ``reads``' pool on
    ``channel`` as ``origin``; hears through ``listener`` (other nodes' payloads only)."""

    def __init__(self, reads: PgReads, listener: Listener, channel: str, origin: str) -> None:
        self._reads = reads
        self._channel = channel
        self._origin = origin
        self._subscribers: list[Finished] = []
        #: Loop time until which another node counts as waiting.
        self._others_until = 0.0
        self._ids: list[bytes] = []
        self._queues: set[str] = set()
        self._flushing: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        listener.subscribe_notices(self._heard)
        listener.subscribe(self._reconnected, _nothing)

    def subscribe(self, finished: Finished) -> None:
        """Call ``finished(ids, queues)`` for each notification of finished jobs from another
        node, and ``finished(None, ())`` after notifications may have been missed."""
        self._subscribers.append(finished)

    @property
    def others_waiting(self) -> bool:
        """Whether another node said within ``WAITING_TTL`` s that callers wait on it."""
        return self._others_until > 0 and asyncio.get_running_loop().time() < self._others_until

    def waiting(self) -> None:
        """Tell the other nodes that callers wait on this one (one NOTIFY, in the background)."""
        self._send({"o": self._origin, "w": 1})

    def finished(self, job_ids: Sequence[bytes], queues: Sequence[str]) -> None:
        """Tell the nodes with waiters that ``job_ids`` (and jobs of ``queues``) finished —
        nothing when no other node waits. Batched: what is finished while a notification is
        being sent goes in the next one. Quick; never raises."""
        if self._closed or not (job_ids or queues) or not self.others_waiting:
            return
        self._ids.extend(job_ids)
        self._queues.update(queues)
        if self._flushing is None:
            self._flushing = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            while self._ids or self._queues:
                ids, self._ids = self._ids[:IDS_PER_NOTICE], self._ids[IDS_PER_NOTICE:]
                queues, self._queues = sorted(self._queues), set()
                await self._notify({"o": self._origin, "f": [i.hex() for i in ids], "fq": queues})
        finally:
            self._flushing = None

    def _send(self, message: Mapping[str, Any]) -> None:
        if self._closed:
            return
        task = asyncio.ensure_future(self._notify(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _notify(self, message: Mapping[str, Any]) -> None:
        """One NOTIFY on the read pool; a failure is logged (a hint: waits also re-read)."""
        try:
            await self._reads.fetchval(Q["notify"], self._channel, json.dumps(message))
        except StoreError as exc:
            log.debug("finished-jobs notification not sent: %s", exc)

    def _heard(self, data: Mapping[str, Any]) -> None:
        """Another node's notification (parsed): note a waiting node, pass finished jobs on."""
        if data.get("w"):
            self._others_until = asyncio.get_running_loop().time() + WAITING_TTL
        hexes, queues = data.get("f"), data.get("fq")
        if not hexes and not queues:
            return
        ids: list[bytes] = []
        for text in hexes if isinstance(hexes, list) else ():
            with contextlib.suppress(TypeError, ValueError):
                ids.append(bytes.fromhex(text))
        names = [q for q in queues if isinstance(q, str)] if isinstance(queues, list) else []
        self._call(ids, names)

    def _reconnected(self, queue: str | None) -> None:
        if queue is None:  # notifications may have been missed: every waiter looks again
            self._others_until = max(self._others_until, asyncio.get_running_loop().time() + WAITING_TTL)
            self._call(None, ())

    def _call(self, ids: Sequence[bytes] | None, queues: Sequence[str]) -> None:
        for callback in self._subscribers:
            try:
                callback(ids, queues)
            except Exception:
                log.exception("finished-jobs subscriber failed")

    async def close(self) -> None:
        """Stop sending (what is being sent finishes or is cancelled). Idempotent."""
        self._closed = True
        pending = [t for t in (self._flushing, *self._tasks) if t is not None]
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _nothing() -> None:
    """The queue-change callback this module does not need."""
