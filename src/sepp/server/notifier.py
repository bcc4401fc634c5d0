"""Wake-ups for long-polling reservers (Reserve's ``wait``): per-queue sets of events."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable


class Notifier:
    """Reservers register an event on the queues they poll; ``ready(queue)`` sets them.

    Register *before* trying to reserve, so a job stored between the attempt and the
    wait still wakes the reserver.
    """

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)

    def register(self, queues: Iterable[str]) -> asyncio.Event:
        """A new event set whenever any of ``queues`` gets ready work."""
        event = asyncio.Event()
        for q in queues:
            self._waiters[q].add(event)
        return event

    def unregister(self, queues: Iterable[str], event: asyncio.Event) -> None:
        """Forget ``event`` (call in a ``finally``)."""
        for q in queues:
            waiters = self._waiters.get(q)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[q]

    def ready_all(self) -> None:
        """Wake every reserver (wake-ups from other nodes may have been missed)."""
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    def ready(self, queue: str) -> None:
        """Wake every reserver polling ``queue``."""
        waiters = self._waiters.get(queue)
        if waiters:
            for event in waiters:
                event.set()
