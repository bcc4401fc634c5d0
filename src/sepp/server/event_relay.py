"""``EventRelay``: live job events across the nodes sharing a store (PostgreSQL).

A watcher on any node sees the events of every node. The nodes already share a
notification channel for wake-ups; the events use one of their own
(``Store.publish_events`` / ``subscribe_events``), and only while some node has watchers:

* **Announcements**: a node tells the others how many watchers it has whenever that number
  changes, and again every ``ANNOUNCE_EVERY`` seconds while it is not zero; a node that
  starts asks the others to announce (``{"o": origin, "h": 1}``). A node relays its events
  while another node announced watchers within the last ``REMOTE_TTL`` seconds (a node that
  died with watchers is forgotten after that).
* **Events**: while relaying, each local event is encoded (a compact JSON array) into the
  current batch; a batch is sent ``FLUSH_AFTER`` seconds after its first event, or at once
  when it reaches ``EVENT_PAYLOAD_BYTES`` — one NOTIFY for many events, never one per event
  — outside every job transaction (after the commit that made the events).

Limits, all of them at-most-once (docs/decisions.md "Live job events"): events made before
another node's announcement arrived, and those sent while the listener connection was away,
are not delivered there; an event longer than a payload (it cannot be, with the fields
clipped to ``MAX_TEXT`` bytes) is dropped; a NOTIFY that fails drops its batch (counted in
``dropped``). PostgreSQL queues notifications for slow listeners (up to 8 GB by default);
a watcher too slow for its own node's buffer is cut off there as on one node.

With a store that is not ``shared`` (SQLite) nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os

from sepp.domain.store_errors import StoreError
from sepp.quoting import clip
from sepp.server.job_events import JobEvent, JobEvents
from sepp.server.parts import ServerParts
from sepp.storage.base import EVENT_PAYLOAD_BYTES

log = logging.getLogger("sepp.events")

#: Seconds between a watching node's announcements (and the most a starting node waits for
#: them when its hello is lost).
ANNOUNCE_EVERY = 5.0
#: Seconds after its last announcement that a node's watchers are still counted.
REMOTE_TTL = 3 * ANNOUNCE_EVERY
#: Seconds a batch of events waits for more before it is sent.
FLUSH_AFTER = 0.005
#: Longest error / reason text relayed, UTF-8 bytes (the progress is bounded by its own limit).
MAX_TEXT = 1_000


def encode_event(e: JobEvent) -> str:
    """``e`` (without its position) as compact JSON: one array of its fields in order."""
    return json.dumps([e.kind, e.job_id.hex(), e.queue, e.job_type, e.state, e.at, e.attempt, e.worker_id,
                       e.run_at, clip(e.error, MAX_TEXT), clip(e.reason, MAX_TEXT), e.progress, e.result_bytes,
                       e.node], ensure_ascii=False, separators=(",", ":"))


def decode_event(item: object) -> JobEvent | None:
    """The ``JobEvent`` of one array ``encode_event`` made (position 0), or None when it is
    not one."""
    if not isinstance(item, list) or len(item) != 14:
        return None
    try:
        kind, hex_id, queue, job_type, state, at, attempt, worker, run_at, error, reason, progress, size, node = item
        return JobEvent(0, int(kind), bytes.fromhex(hex_id), str(queue), str(job_type), int(state), int(at),
                        int(attempt), str(worker), int(run_at), str(error), str(reason), str(progress), int(size),
                        str(node))
    except (TypeError, ValueError):
        return None


class EventRelay:
    """Relays the live job events of ``parts.job_events`` to and from the other nodes of
    ``parts.store`` (see the module docstring). ``start``/``stop`` around the node's life."""

    def __init__(self, parts: ServerParts, *, announce_every: float = ANNOUNCE_EVERY,
                 remote_ttl: float = REMOTE_TTL) -> None:
        self.hub: JobEvents = parts.job_events
        self.store = parts.store
        self.announce_every = announce_every
        self.remote_ttl = remote_ttl
        self.origin = os.urandom(8).hex()
        #: Other nodes' watcher counts: origin → (watchers, loop time of the announcement).
        self._remote: dict[str, tuple[int, float]] = {}
        self._batch: list[str] = []
        self._batch_bytes = 0
        self._flush: asyncio.TimerHandle | None = None
        self._announce = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        #: Batches (events) that could not be sent, and events too long for a payload.
        self.dropped = 0
        #: Batches sent (tests, metrics).
        self.sent = 0

    async def start(self) -> None:
        """Listen for the other nodes' events and announcements, ask them to announce, and
        start the announcement loop. Nothing for a store that is not shared."""
        if not self.store.shared:
            return
        self.store.subscribe_events(self._on_payload)
        self.hub.relay = self._add
        self.hub.on_watchers = lambda _n: self._announce.set()
        self._send(json.dumps({"o": self.origin, "h": 1}))
        self._loop_task = asyncio.create_task(self._announcements(), name="sepp-event-relay")

    async def stop(self) -> None:
        """Stop relaying: the batch in hand is sent, the loop ended, sends in flight awaited."""
        self.hub.relay = None
        self.hub.on_watchers = None
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
            self._flush_now()
            with contextlib.suppress(Exception):
                await self._publish(json.dumps({"o": self.origin, "w": 0}))
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------ announcements

    async def _announcements(self) -> None:
        loop = asyncio.get_running_loop()
        last = -1
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._announce.wait(), self.announce_every)
            self._announce.clear()
            count = self.hub.watchers
            if count or count != last:
                self._send(json.dumps({"o": self.origin, "w": count}))
                last = count
            self._expire(loop.time())

    def _expire(self, now: float) -> None:
        for origin, (_count, at) in list(self._remote.items()):
            if now - at > self.remote_ttl:
                del self._remote[origin]
        self.hub.remote_watchers = any(count for count, _at in self._remote.values())

    def _on_payload(self, payload: str) -> None:
        try:
            data = json.loads(payload)
            origin = data["o"]
        except (ValueError, KeyError, TypeError):
            return
        if origin == self.origin:
            return
        if "w" in data:
            count = data["w"] if isinstance(data["w"], int) else 0
            now = asyncio.get_running_loop().time()
            if count:
                self._remote[origin] = (count, now)
            else:
                self._remote.pop(origin, None)
            self._expire(now)
        if data.get("h") and self.hub.watchers:
            self._announce.set()
        events = data.get("e")
        if isinstance(events, list) and self.hub.watchers:
            publish = self.hub.publish
            for item in events:
                event = decode_event(item)
                if event is not None:
                    publish(event, local=False)

    # ------------------------------------------------------------ events

    def _add(self, event: JobEvent) -> None:
        """Put one local event into the batch (``JobEvents.relay``)."""
        text = encode_event(event)
        size = len(text.encode()) + 1
        if size > EVENT_PAYLOAD_BYTES - 64:
            self.dropped += 1
            return
        if self._batch_bytes + size > EVENT_PAYLOAD_BYTES - 64:
            self._flush_now()
        self._batch.append(text)
        self._batch_bytes += size
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(FLUSH_AFTER, self._flush_now)

    def _flush_now(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if not self._batch:
            return
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        self._send(f'{{"o":{json.dumps(self.origin)},"e":[{",".join(batch)}]}}')

    def _send(self, payload: str) -> None:
        task = asyncio.ensure_future(self._publish(payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, payload: str) -> None:
        try:
            await self.store.publish_events(payload)
            self.sent += 1
        except StoreError as exc:  # at-most-once: the batch is dropped
            self.dropped += 1
            log.warning("live job events not sent to the other nodes: %s", exc)


__all__ = ["ANNOUNCE_EVERY", "FLUSH_AFTER", "REMOTE_TTL", "EventRelay", "decode_event", "encode_event"]
