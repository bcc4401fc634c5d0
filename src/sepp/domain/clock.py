"""The one place sepp reads the time.

The engine, the sweeper, the admin engine and the stores take a ``Clock`` and never call
``time`` themselves, so a test can drive time with ``FakeClock`` — a backoff schedule, a
lease expiry or a retention window is then checked exactly and without sleeping.

Two readings: ``now()`` is wall-clock UTC in integer microseconds since the Unix epoch
(what is stored: ``run_at``, ``lease_expires_at``, ``finished_at``); ``monotonic()`` is
seconds from an arbitrary origin that never goes back (intervals, rates, uptime).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of time. Implementations: ``SystemClock`` (the default), ``FakeClock`` (tests)."""

    def now(self) -> int:
        """Wall-clock UTC time, integer microseconds since the Unix epoch."""

    def monotonic(self) -> float:
        """Seconds (float) from an arbitrary origin; never decreases."""


class SystemClock:
    """The machine's clocks: ``time.time_ns`` and ``time.monotonic``."""

    __slots__ = ()

    def now(self) -> int:
        """Wall-clock UTC time, integer microseconds since the Unix epoch."""
        return time.time_ns() // 1000

    def monotonic(self) -> float:
        """``time.monotonic()``, seconds."""
        return time.monotonic()

    def __reduce__(self) -> tuple[type[SystemClock], tuple[()]]:
        return (SystemClock, ())


#: The process-wide system clock (stateless; shared).
SYSTEM_CLOCK = SystemClock()


def now_us() -> int:
    """Wall-clock UTC time in integer microseconds since the Unix epoch (``SYSTEM_CLOCK``).

    For code outside the engine, sweeps and stores (CLI, tests, benchmarks); the server
    reads its injected ``Clock`` instead."""
    return time.time_ns() // 1000


class FakeClock:
    """A clock that moves only when told (tests). Starts at ``start_us`` (µs UTC; default
    2026-01-01T00:00:00Z) with a monotonic reading of ``0.0``; ``advance`` moves both."""

    __slots__ = ("_mono", "_wall")

    def __init__(self, start_us: int = 1_767_225_600_000_000) -> None:
        self._wall = start_us
        self._mono = 0.0

    def now(self) -> int:
        """The fake wall-clock time, µs UTC."""
        return self._wall

    def monotonic(self) -> float:
        """The fake monotonic reading, seconds."""
        return self._mono

    def advance(self, seconds: float = 0.0, *, us: int = 0) -> int:
        """Move time forward by ``seconds`` plus ``us`` microseconds (never back: a negative
        step raises ``ValueError``). Returns the new ``now()``."""
        step = round(seconds * 1_000_000) + us
        if step < 0:
            raise ValueError(f"FakeClock only moves forward (step {step} µs)")
        self._wall += step
        self._mono += step / 1_000_000
        return self._wall

    def set(self, now_us: int) -> None:
        """Jump the wall clock to ``now_us`` (µs UTC; not earlier than now), the monotonic
        reading by the same step."""
        self.advance(us=now_us - self._wall)
