"""``ProgressGate``: at most one progress write per job per ``every`` seconds, the latest
value winning (the lease keeper sends what it lets through with an ``ExtendLease``)."""

from __future__ import annotations

import asyncio
import math

from sepp.domain.clock import Clock

#: Shortest time between two progress writes of one job, seconds.
PROGRESS_EVERY = 1.0


class ProgressGate:
    """The progress sends of one job, timed by ``clock.monotonic()``.

    ``due_in()`` is how long to wait before the next send may go (0: now); ``take(value)``
    records a send of ``value`` now and returns it — or None when it is the value sent last
    (nothing new to write). ``timer`` / ``task`` are the keeper's scheduled send and the call
    in flight."""

    __slots__ = ("clock", "every", "sent", "sent_at", "task", "timer")

    def __init__(self, clock: Clock, every: float = PROGRESS_EVERY) -> None:
        self.clock = clock
        self.every = every
        self.sent: str | None = None
        self.sent_at = -math.inf
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None

    def due_in(self) -> float:
        """Seconds until a send is allowed (0 when it is now)."""
        return max(0.0, self.sent_at + self.every - self.clock.monotonic())

    def take(self, value: str | None) -> str | None:
        """Record a send of ``value`` now and return it; None (nothing recorded) for None or
        the value sent last."""
        if value is None or value == self.sent:
            return None
        self.sent, self.sent_at = value, self.clock.monotonic()
        return value

    def forget(self, value: str) -> None:
        """The send of ``value`` failed: a later ``take`` of the same value sends it again."""
        if self.sent == value:
            self.sent = None

    def cancel(self) -> None:
        """Cancel the scheduled send (the job was settled or lost)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


__all__ = ["PROGRESS_EVERY", "ProgressGate"]
