"""Engine events as subscriber lists (issue 9 item 6).

``JobEngine`` announces three things: SCHEDULED jobs stored (the promotion sweep wakes in
time), rows committed by an enqueue (admin throughput stats) and jobs that reached
COMPLETED / DEAD_LETTERED (admin stats). Each is an ``Event``: any number of subscribers
(the sweeper, the admin engine, later metrics or tracing) sit next to each other, none
replaces another. A subscriber that raises is logged and skipped: the other subscribers
still run and the request that emitted the event is not failed by it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, ParamSpec

from sepp.storage.base import Dedups, JobRow

log = logging.getLogger("sepp.events")

P = ParamSpec("P")


class Event(Generic[P]):
    """One event with a list of subscribers, called in subscription order.

    ``event(*args)`` emits: each subscriber is called with ``args``; an exception from one is
    logged (logger ``sepp.events``, with traceback) and does not reach the emitter or stop
    the subscribers after it. Subscribers run synchronously on the emitting task, so they
    must be quick and must not block.
    """

    __slots__ = ("_subscribers", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._subscribers: tuple[Callable[P, None], ...] = ()

    def subscribe(self, fn: Callable[P, None]) -> Callable[[], None]:
        """Add ``fn``; returns a function that removes it again (idempotent)."""
        self._subscribers = (*self._subscribers, fn)

        def unsubscribe() -> None:
            self._subscribers = tuple(s for s in self._subscribers if s is not fn)

        return unsubscribe

    @property
    def subscribers(self) -> tuple[Callable[P, None], ...]:
        """The current subscribers, in call order."""
        return self._subscribers

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Emit: call every subscriber; log and skip the ones that raise."""
        for fn in self._subscribers:
            try:
                fn(*args, **kwargs)
            except Exception:
                log.exception("subscriber %r of engine event %s raised; skipped", fn, self.name)


@dataclass(frozen=True, slots=True)
class EngineEvents:
    """The events a ``JobEngine`` emits.

    - ``scheduled(run_at_us)``: SCHEDULED jobs were stored or retried; ``run_at_us`` is the
      earliest run_at (µs since the epoch, UTC).
    - ``stored(rows, dedups)``: one enqueue commit; ``dedups`` (``storage.base.Dedups``) holds
      the indexes of rows that were deduplicated (not stored) with the existing job.
    - ``finished(queue, state, count)``: ``count`` jobs of ``queue`` reached ``state``
      (COMPLETED = 4 or DEAD_LETTERED = 5).
    """

    scheduled: Event[[int]] = field(default_factory=lambda: Event("scheduled"))
    stored: Event[[Sequence[JobRow], Dedups]] = field(default_factory=lambda: Event("stored"))
    finished: Event[[str, int, int]] = field(default_factory=lambda: Event("finished"))
