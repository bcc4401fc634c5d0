"""``Cluster``: what a node does because other nodes share its store.

* **Wake-ups**: the store tells (``Store.subscribe``) when another node made jobs ready;
  the notifier wakes this node's long-polling reservers (``None``: wake them all).
* **Queue settings**: when another node creates, changes or deletes a queue, the registry
  is reloaded from the store (``QueueRegistry.refresh``) at once, and every
  ``QUEUE_REFRESH_EVERY`` seconds regardless — so a change made on one node takes effect
  on every node within that bound even if its notification was lost (docs/deploying.md).
* **Lost wake-ups**: every ``RECHECK_EVERY`` seconds every long-polling reserver of the node
  is woken to look at the store once more, so a job made ready by another node is found
  within that bound even when its notification never arrived (River's fetch poll interval
  does the same; docs/deploying.md, "Long polls wake across nodes").
* **Heartbeat**: the node's row (name, address, version, started, last seen) is written
  every ``HEARTBEAT_EVERY`` seconds; ``GetServerInfo`` and the UI list the nodes. The
  workers this node saw go with it (``Store.report_workers``, the Workers page).

With a store that is not ``shared`` (SQLite) only the heartbeat runs, in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sepp import __version__
from sepp.domain.records import NodeRecord
from sepp.server.parts import ServerParts
from sepp.server.workers import FORGET_AFTER
from sepp.storage.errors import StoreClosed, StoreError

log = logging.getLogger("sepp.cluster")

#: Seconds between heartbeats of a node's row.
HEARTBEAT_EVERY = 5.0
#: Longest time (seconds) a queue change made on another node can go unseen here.
QUEUE_REFRESH_EVERY = 5.0
#: Longest time (seconds) a long-polling reserver can miss a job made ready on another node
#: whose wake-up notification was lost: then every parked reserve of the node looks again.
RECHECK_EVERY = 1.0
#: A node not seen for this many seconds is shown as gone in the UI (three missed heartbeats;
#: GetServerInfo lists every node with its last heartbeat and leaves the judgement to the reader).
NODE_GONE_AFTER = 3 * HEARTBEAT_EVERY


class Cluster:
    """Keeps one node in step with the others on a shared store (see the module docstring).

    ``parts``: the node's shared parts (clock, store, queues, notifier, workers, nodes);
    ``node``: this node's name; ``address``: its gRPC address (as configured);
    ``heartbeat_every`` / ``refresh_every`` / ``recheck_every``: seconds (tests shorten them;
    ``recheck_every`` 0 turns the rechecks off).
    """

    def __init__(self, parts: ServerParts, node: str, address: str, *, heartbeat_every: float = HEARTBEAT_EVERY,
                 refresh_every: float = QUEUE_REFRESH_EVERY, recheck_every: float = RECHECK_EVERY) -> None:
        self.parts = parts
        self.node = node
        self.address = address
        self.heartbeat_every = heartbeat_every
        self.refresh_every = refresh_every
        self.recheck_every = recheck_every
        self.started_at = parts.clock.now()
        self._duplicate_warned = False
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        #: Queue refreshes applied (tests, metrics).
        self.refreshes = 0

    def record(self) -> NodeRecord:
        """This node's row as of now."""
        return NodeRecord(self.node, self.address, __version__, self.started_at, self.parts.clock.now())

    async def start(self) -> None:
        """Subscribe to the store's cluster events, write the first heartbeat, start the loops."""
        store = self.parts.store
        notifier = self.parts.notifier
        store.subscribe(lambda q: notifier.ready_all() if q is None else notifier.ready(q), self._changed.set)
        await self._beat()
        self._tasks.append(asyncio.create_task(self._heartbeats(), name="sepp-heartbeat"))
        if store.shared:
            self._tasks.append(asyncio.create_task(self._refreshes(), name="sepp-queue-refresh"))
            if self.recheck_every > 0:
                self._tasks.append(asyncio.create_task(self._rechecks(), name="sepp-reserve-recheck"))

    async def stop(self) -> None:
        """Stop the loops (the node's row stays, with its last ``last_seen``). Idempotent."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _rechecks(self) -> None:
        """Wake every parked long poll each ``recheck_every`` seconds (shared stores only): the
        notifications of other nodes are hints, and one lost (a send that failed after its
        commit, a listener busy reconnecting) must not leave a ready job unseen for a whole
        long poll. A woken reserve that finds nothing parks again; the cost is one reserve
        attempt per parked call and interval."""
        while True:
            await asyncio.sleep(self.recheck_every)
            self.parts.notifier.ready_all()

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_every)
            try:
                await self._check_unique()
                await self._beat()
            except StoreClosed:
                return
            except StoreError as exc:  # the database is away: the next beat tries again
                log.warning("heartbeat not written: %s", exc)

    async def _check_unique(self) -> None:
        """Warn (once) when another live process writes this node's row: before each beat
        after the first, the row must still carry this process's ``started_at`` — a second
        node of the same name overwrites it within a heartbeat. (At start the row may be a
        crashed predecessor's, with a recent ``last_seen``: that one never writes again, so
        it is not taken for a duplicate.)"""
        if self._duplicate_warned:
            return
        for other in await self.parts.store.nodes():
            if other.name == self.node and other.started_at != self.started_at:
                self._duplicate_warned = True
                log.warning("another node named %r (at %s) is sending heartbeats: node names must be unique "
                            "(--node-name); both now show as one node", self.node, other.address or "?",
                            extra={"event": "duplicate_node_name", "address": other.address})

    async def _beat(self) -> None:
        """Write this node's row and its workers, then read every node's
        (``parts.nodes``)."""
        store = self.parts.store
        await store.heartbeat(self.record())
        forget_before = self.parts.clock.now() - int(FORGET_AFTER * 1_000_000)
        try:
            await store.report_workers(self.node, self.parts.workers.snapshot(self.node), forget_before)
        except StoreClosed:
            raise
        except StoreError as exc:  # the node list must not depend on the workers' report
            log.warning("workers not reported: %s", exc)
        self.parts.nodes = await store.nodes()

    async def refresh(self) -> bool:
        """Reload the queues from the store once (``QueueRegistry.refresh``); True when
        applied, False when a local change overtook the read (try again). Raises
        ``StoreError`` when the store cannot be read."""
        registry = self.parts.queues
        read_at = registry.generation
        records = await self.parts.store.load_queues()
        resumed = registry.refresh(records, read_at)
        if resumed is None:
            return False
        self.refreshes += 1
        for name in resumed:
            self.parts.notifier.ready(name)
        return True

    async def _refreshes(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.refresh_every)
            self._changed.clear()
            try:
                if not await self.refresh():
                    self._changed.set()  # overtaken by a local change: read again at once
            except StoreClosed:
                return
            except StoreError as exc:
                log.warning("queue settings not refreshed: %s", exc)
