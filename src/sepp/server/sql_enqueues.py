"""``SqlEnqueues``: what a node does with the jobs applications commit through the SQL
functions ``enqueue`` / ``enqueue_batch`` (PostgreSQL; docs/enqueue-in-transaction.md).

No node admits those jobs, so no engine event reports them. Every node hears of each such
commit (``Store.on_sql_enqueued``, the notification the function sends at commit, a few ms
after it) and then:

* **counts** the jobs stored per queue (``EngineEvents.sql_enqueued``: the metric
  ``sepp_jobs_enqueued_sql_total``, which every node counts whole — docs/decisions.md
  "Jobs enqueued through SQL: the events and the count");
* while this node has ``WatchJobs`` watchers, **reads** those jobs (``Store.sql_enqueued_jobs``,
  by their blocks of seqs) and hands each watcher an ``enqueued`` event
  (``JobEvents.sql_enqueued``) — never relayed: every node makes them for its own watchers.
  Reads are coalesced: what is heard while one read runs goes into the next. A read that
  fails drops its events (at-most-once, like every live event; counted in ``dropped``).

With a store that is not ``shared`` (SQLite) nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence

from sepp.server.parts import ServerParts
from sepp.storage.errors import StoreClosed, StoreError

log = logging.getLogger("sepp.events")

#: Blocks of seqs one read takes at most (a few notifications' worth; more wait for the next).
MAX_BLOCKS_PER_READ = 1024


class SqlEnqueues:
    """The node's part in the jobs enqueued through SQL (see the module docstring):
    ``start`` / ``stop`` around the node's life."""

    def __init__(self, parts: ServerParts) -> None:
        self.parts = parts
        self._blocks: list[tuple[int, int]] = []
        self._reading: asyncio.Task[None] | None = None
        self._stopped = False
        #: Reads that failed (their events were not delivered).
        self.dropped = 0
        #: Jobs read and handed to the watchers as ``enqueued`` events (tests).
        self.events = 0

    async def start(self) -> None:
        """Hear the store's SQL-enqueue notices (nothing for a store that is not shared)."""
        if self.parts.store.shared:
            self.parts.store.on_sql_enqueued(self._heard)

    async def stop(self) -> None:
        """Stop reading (a read in flight is cancelled: its events are dropped). Idempotent."""
        self._stopped = True
        self._blocks = []
        task, self._reading = self._reading, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _heard(self, counts: Mapping[str, int], blocks: Sequence[tuple[int, int]]) -> None:
        if self._stopped:
            return
        if counts:
            self.parts.events.sql_enqueued(counts)
        if blocks and self.parts.job_events.watchers:
            self._blocks.extend(blocks)
            if self._reading is None:
                self._reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        hub, store = self.parts.job_events, self.parts.store
        try:
            while self._blocks and hub.watchers:
                blocks, self._blocks = self._blocks[:MAX_BLOCKS_PER_READ], self._blocks[MAX_BLOCKS_PER_READ:]
                try:
                    jobs = await store.sql_enqueued_jobs(blocks)
                except StoreClosed:
                    return
                except StoreError as exc:
                    self.dropped += 1
                    log.warning("live enqueued events of jobs enqueued through SQL not delivered: %s", exc)
                    continue
                if jobs and hub.watchers:
                    hub.sql_enqueued(jobs)
                    self.events += len(jobs)
            self._blocks = []  # nobody watches any more: nothing to read
        finally:
            self._reading = None


__all__ = ["MAX_BLOCKS_PER_READ", "SqlEnqueues"]
