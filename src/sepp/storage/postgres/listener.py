"""The wake-up listener of the PostgreSQL backend: one connection that
LISTENs on the schema's channel, so a long-polling ``Reserve`` on this node wakes when
another node made jobs ready (an enqueue, a promotion, a retry, a reclaim, a redrive).

Payloads are JSON ``{"o": origin, "q": [queue, …]}`` sent by ``committer`` at commit; this
node's own (``origin``) are ignored, its engine has woken its reservers already. Other keys
(finished jobs, waiting nodes: ``finished``) go to the ``subscribe_notices`` callbacks. When the
connection is lost (PostgreSQL restarted) it is made again, retrying every
``RECONNECT_EVERY`` seconds, and the subscribers are called with ``None`` (and told the queues may
have changed): notifications may have been missed meanwhile, so every waiter wakes and
looks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from sepp.storage.errors import StoreError

log = logging.getLogger("sepp.storage.postgres")

#: Seconds between attempts to make a lost listener connection again.
RECONNECT_EVERY = 0.5


def events_channel(channel: str) -> str:
    """The live job events' channel of the wake-up ``channel``: ``{channel}_ev``, or, when
    that passes PostgreSQL's 63-byte identifier limit (``pg_notify`` refuses a longer name;
    LISTEN would cut it), ``sepp_ev_`` and a hash of ``channel``."""
    name = f"{channel}_ev"
    if len(name.encode()) <= 63:
        return name
    return "sepp_ev_" + hashlib.sha256(channel.encode()).hexdigest()[:40]


class Listener:
    """LISTEN on ``channel`` with connections made by ``connect``; ``subscribe`` callbacks
    get each queue another node woke (or ``None``: wake everything)."""

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]], channel: str, origin: str) -> None:
        self._connect = connect
        self._channel = channel
        #: The live job events' channel (``Store.publish_events``): payloads go to
        #: ``subscribe_events`` callbacks as they are.
        self.events_channel = events_channel(channel)
        self._event_subscribers: list[Callable[[str], None]] = []
        self._origin = origin
        self._subscribers: list[Callable[[str | None], None]] = []
        self._queue_subscribers: list[Callable[[], None]] = []
        self._notice_subscribers: list[Callable[[dict[str, Any]], None]] = []
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def subscribe(self, ready: Callable[[str | None], None], queues_changed: Callable[[], None]) -> None:
        """Call ``ready(queue)`` for each queue another node made jobs ready in (``None``:
        wake everything) and ``queues_changed()`` when it changed queue rows."""
        self._subscribers.append(ready)
        self._queue_subscribers.append(queues_changed)

    def subscribe_notices(self, notice: Callable[[dict[str, Any]], None]) -> None:
        """Call ``notice(payload)`` with every other node's notification (the parsed JSON
        object), for what the store reads of it beyond ready queues and queue changes
        (``finished``: finished jobs, waiting nodes)."""
        self._notice_subscribers.append(notice)
    def subscribe_events(self, on_payload: Callable[[str], None]) -> None:
        """Call ``on_payload(text)`` for each payload on the events channel (any node's)."""
        self._event_subscribers.append(on_payload)

    async def start(self) -> None:
        """Connect and LISTEN, then keep the connection (raises ``StoreError`` when the
        first connection cannot be made)."""
        await self._listen()
        self._task = asyncio.create_task(self._keep(), name="sepp-pg-listener")

    async def _listen(self) -> None:
        conn = await self._connect()
        try:
            await conn.add_listener(self._channel, self._on_notify)
            await conn.add_listener(self.events_channel, self._on_event)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._on_lost)
        self._conn = conn
        self._lost.clear()

    def _on_lost(self, _conn: Any) -> None:
        self._lost.set()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            data = json.loads(payload)
            if data.get("o") == self._origin:
                return
            queues = [q for q in data.get("q", ()) if isinstance(q, str)]
            changed = bool(data.get("k"))
        except (ValueError, AttributeError, TypeError):
            return
        for q in queues:
            self._wake(q)
        if changed:
            self._changed()
        for notice in self._notice_subscribers:
            try:
                notice(data)
            except Exception:
                log.exception("notification subscriber failed")

    def _on_event(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        for callback in self._event_subscribers:
            try:
                callback(payload)
            except Exception:  # a subscriber's bug must not stop the listener
                log.exception("job-event subscriber failed")

    def _changed(self) -> None:
        for callback in self._queue_subscribers:
            try:
                callback()
            except Exception:
                log.exception("queue-change subscriber failed")

    def _wake(self, queue: str | None) -> None:
        for callback in self._subscribers:
            try:
                callback(queue)
            except Exception:  # a subscriber's bug must not stop the listener
                log.exception("wake-up subscriber failed")

    async def _keep(self) -> None:
        while not self._stopping:
            await self._lost.wait()
            if self._stopping:
                return
            self._conn = None
            while not self._stopping:
                try:
                    await self._listen()
                except (StoreError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    await asyncio.sleep(RECONNECT_EVERY)
                    continue
                log.info("listener connection made again; waking every waiting reserver")
                self._wake(None)
                self._changed()
                break

    async def stop(self) -> None:
        """Stop listening and close the connection. Idempotent."""
        self._stopping = True
        self._lost.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)

    def kill(self) -> None:
        """Forced stop: drop the connection at once."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None
