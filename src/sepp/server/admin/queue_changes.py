"""The admin's queue changes: declare, change settings, pause / resume, purge and delete.

Every change is written over the queue's STORED row (``Store.change_queue``), not over this
node's copy, and logged as one ``sepp.queues`` line. Errors are ``sepp.server.errors``
exceptions (``NotFound``, ``InvalidRequest``, ``QueueLimitReached``) and ``StateConflict``
(``admin.checks``); a store failure propagates as ``StoreError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sepp.domain.admin import StateCounts
from sepp.domain.records import QueueRecord
from sepp.domain.states import State
from sepp.limits import QueueSettings
from sepp.quoting import quote
from sepp.rejections import Reason, RejectionCode
from sepp.server.admin.checks import StateConflict
from sepp.server.admin.jobs import ALL_STATES, CHUNK, JobAdmin
from sepp.server.admin.settings import merge_settings
from sepp.server.errors import InvalidRequest, NotFound, QueueLimitReached
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueState, stored_settings
from sepp.storage.admin import AdminStore

#: Queue declared, changed, paused, resumed, purged, deleted (significant events).
qlog = logging.getLogger("sepp.queues")

#: Purge without states: the waiting backlog.
DEFAULT_PURGE = (int(State.SCHEDULED), int(State.READY))


def _queue_event(event: str, name: str, what: str, **fields: Any) -> None:
    """One ``sepp.queues`` line for an admin change of queue ``name`` (API or UI)."""
    qlog.info("queue %s %s (admin)", quote(name), what, extra={"event": event, "queue": name, "source": "admin",
                                                                **fields})


def not_empty_message(name: str, counts: StateCounts) -> str:
    """The refusal of DeleteQueue without ``force`` (seen by ``sepp queues delete`` and
    ``AdminClient.delete_queue`` callers): what the queue holds, per state, and the two ways
    out that work — ``force``, or a purge of exactly those states (a purge without states
    takes only SCHEDULED and READY, so "purge it first" alone was not enough)."""
    held = [(label, n) for label, n in ((s.name.lower(), getattr(counts, s.name.lower())) for s in State) if n]
    states = " ".join(f"--state {label}" for label, _ in held)
    return (f"queue {quote(name)} holds {counts.total} job(s) ({', '.join(f'{n} {label}' for label, n in held)}); "
            f"delete it with force (sepp queues delete {name} --force; the API's DeleteQueueRequest.force) or "
            f"purge those states first (sepp queues purge {name} {states}; a purge without --state deletes only "
            "scheduled and ready jobs)")


class QueueChanges:
    """Queue administration over the node's ``ServerParts`` (queues, store, notifier, validator,
    limits and clock) and an ``AdminStore``.

    ``jobs`` wakes the long-polls a purge frees; ``forget`` drops what the admin counts in
    memory for a deleted queue; ``changed`` is called after a write that changes how many
    jobs a state holds.
    """

    def __init__(self, parts: ServerParts, store: AdminStore, jobs: JobAdmin, forget: Callable[[str], None],
                 changed: Callable[[], None]) -> None:
        self.parts = parts
        self.store = store
        self._jobs = jobs
        self._forget = forget
        self._changed = changed
        self._clock_now = parts.clock.now

    def _check_name(self, name: str) -> None:
        rejection = self.parts.validator.probe_queue_name(name)
        if rejection is not None and rejection.code == RejectionCode.QUEUE_NAME_INVALID.to_wire():
            raise InvalidRequest(f"QueueNameInvalid: {rejection.message}", "name")
    async def _change(self, q: QueueState, patch: Mapping[str, Any] | None = None, paths: Sequence[str] = (), *,
                      paused: bool | None = None, declared: bool | None = None, create: bool = False) -> bool:
        """Change queue ``q`` over its STORED row, not over this node's copy (which may not
        have taken another node's change yet): ``patch`` (the fields ``paths`` name, as
        ``merge_settings``) merged over the stored settings and validated as a whole, and
        the flags given set, in one write (``Store.change_queue``); then ``q`` takes the row
        as written, other nodes' changes included.

        Returns whether the row was created (there was none). Raises ``InvalidRequest`` as
        ``merge_settings`` (nothing written) and ``NotFound`` when the row is gone though
        this node had it stored (deleted on another node) — unless ``create`` (a declare):
        then it is created anew from the server defaults."""
        lim, labels = self.parts.limits, self.parts.limits.max_encoding_bytes
        taken: list[QueueSettings] = []
        absent: list[bool] = []

        def change(stored: QueueRecord | None) -> QueueRecord:
            absent[:] = [stored is None]
            if stored is None:
                if q.persisted and not create:
                    raise NotFound(f"queue {quote(q.name)} does not exist (deleted on another node)",
                                   Reason.QUEUE_NOT_FOUND)
                if q.persisted:  # deleted on another node, declared again: a new queue
                    base, was_paused, was_declared = self.parts.queues.defaults, False, False
                else:
                    base, was_paused, was_declared = q.settings, q.paused, q.declared  # on demand, not stored yet
            else:
                base = stored_settings(stored, labels, quiet=True)
                was_paused, was_declared = stored.paused, stored.declared
            settings = base if patch is None else merge_settings(base, patch, paths, lim.max_message_bytes, labels)
            taken[:] = [settings]
            return QueueRecord(q.name, settings.model_dump_json(), was_paused if paused is None else paused,
                               was_declared if declared is None else declared)

        self.parts.queues.touch()  # a cluster refresh reading meanwhile must not undo it
        rec = await self.parts.store.change_queue(q.name, change, self._clock_now())
        if q.settings != taken[0]:
            q.apply(taken[0])
        q.paused, q.declared, q.persisted = rec.paused, rec.declared, True
        self.parts.queues.touch()
        return absent[0]

    async def declare_queue(self, name: str, patch: Mapping[str, Any] | None = None,
                            paths: Sequence[str] = ()) -> tuple[QueueState, bool]:
        """Create ``name`` (server defaults + ``patch``) or mark it declared (applying ``patch``
        over its stored settings when given, as ``update_queue``). Returns the queue and
        whether it was created.

        Raises ``InvalidRequest`` for a bad name or setting, ``QueueLimitReached`` when a new
        queue would exceed ``limits.max_queues``.
        """
        self._check_name(name)
        registry = self.parts.queues
        current = registry.get(name)
        if current is None:
            if registry.full():
                raise QueueLimitReached(name, registry.max_queues, registry.count())
            # Written over the stored row (``_change``): another node may have created the
            # queue since this node loaded its queues; its keys and pause are kept then.
            q = QueueState(name, registry.defaults)
            created = await self._change(q, patch, paths, declared=True)
            raced = registry.get(name)  # an enqueue may have created it on demand meanwhile
            if raced is not None:
                raced.apply(q.settings)
                raced.paused, raced.declared, raced.persisted = q.paused, True, True
                _queue_event("queue_declared", name, "declared", settings=list(paths))
                return raced, False
            registry.put(q)
            _queue_event("queue_declared", name, "declared", settings=list(paths))
            return q, created
        await self._change(current, patch, paths, declared=True, create=True)
        if patch is not None:
            self.parts.notifier.ready(name)  # a flow limit raised or lifted frees capacity now
        _queue_event("queue_declared", name, "declared" + (f", changed: {', '.join(paths)}" if paths else ""),
                     settings=list(paths))
        return current, False

    async def update_queue(self, name: str, patch: Mapping[str, Any], paths: Sequence[str]) -> QueueState:
        """Apply settings to an existing queue at once (validation and reserve use them next
        call; this node's long-polling reservers of the queue are woken to try again, so a
        raised or lifted flow limit hands out jobs at once).

        The fields ``paths`` name are merged over the queue's stored settings inside the
        write (``_change``), so a change another node made to other fields meanwhile is kept
        even when this node has not taken it yet; the result is validated as a whole
        (``InvalidRequest``, nothing written) and this node's copy takes the row written."""
        q = self._jobs.queue(name)
        await self._change(q, patch, paths)
        self.parts.notifier.ready(name)  # a flow limit raised or lifted frees capacity now
        _queue_event("queue_changed", name, f"changed: {', '.join(paths) or 'settings'}", settings=list(paths))
        return q

    async def set_paused(self, name: str, paused: bool) -> QueueState:
        """Pause (Reserve gives nothing) or resume (waiting reservers are woken); the
        stored settings are kept as they are (``_change``)."""
        q = self._jobs.queue(name)
        await self._change(q, paused=paused)
        _queue_event("queue_paused" if paused else "queue_resumed", name, "paused" if paused else "resumed")
        if not paused:
            self.parts.notifier.ready(name)
        return q

    async def purge(self, name: str, states: Iterable[int] = ()) -> int:
        """Delete the queue's jobs in ``states`` (default SCHEDULED + READY); returns how many.
        Raises ``NotFound`` for an unknown queue, ``InvalidRequest`` for an unknown state."""
        self._jobs.queue(name)
        wanted = tuple(dict.fromkeys(states)) or DEFAULT_PURGE
        for s in wanted:
            if s not in ALL_STATES:
                raise InvalidRequest(f"unknown job state {s}", "states")
        total = 0
        while True:
            n = await self.store.purge(name, wanted, CHUNK)
            total += n
            if n < CHUNK:
                break
        self._changed()
        if total:
            self._jobs.freed(name, wanted)
            self.parts.events.ended((), [name])  # waits for its jobs learn they are gone
        _queue_event("queue_purged", name, f"purged: {total} job(s) deleted", count=total)
        return total

    async def delete_queue(self, name: str, force: bool = False) -> int:
        """Forget a queue; with ``force`` its jobs go too. Returns the jobs deleted.

        Raises ``StateConflict`` (QUEUE_NOT_EMPTY) for a non-empty queue without ``force``,
        ``NotFound`` for an unknown one.
        """
        self._jobs.queue(name)
        deleted = 0
        for _ in range(5):
            if force:
                deleted += await self.purge(name, ALL_STATES)
            if await self.store.delete_queue(name):
                self.parts.queues.remove(name)
                self._forget(name)
                self._changed()
                _queue_event("queue_deleted", name, f"deleted with {deleted} job(s)", count=deleted)
                return deleted
            if not force:
                counts = (await self.store.state_counts(name)).get(name, StateCounts())
                if not counts.total:  # emptied since the delete looked: try it again
                    continue
                raise StateConflict(Reason.QUEUE_NOT_EMPTY, not_empty_message(name, counts),
                                    {"jobs": str(counts.total)})
        raise StateConflict(Reason.QUEUE_NOT_EMPTY, f"queue {quote(name)} keeps receiving jobs; pause producers first")
