"""When a schedule fires: tick times in µs UTC from a ``PeriodicSettings``.

* ``cron``: cronsim evaluates the expression in the schedule's time zone with Debian cron's
  DST rules. A job at a fixed local time that falls in the hour skipped when clocks go
  forward (02:30 on the spring-forward day in Europe/Berlin) runs once, right after the
  jump (03:00 local); one in the hour repeated when clocks go back runs once, at its first
  occurrence (02:30 summer time). Expressions with a wildcard hour (``*/30 * * * *``) fire
  by the clock in absolute time, in both copies of the repeated hour. Whatever the rule,
  every node computes the same UTC instants, so the idempotency key of a tick is the same
  everywhere. cronsim's forward step can return an instant at or before its start inside a
  repeated hour: ``next_after`` skips those (``tests/unit/test_periodic_timetable.py``).
* ``every``: ticks at whole multiples of the interval since 1970-01-01T00:00:00Z, so nodes
  agree without talking to each other.

Ticks are whole seconds. ``tick_key`` is the idempotency key of one tick's job.
"""

from __future__ import annotations

from datetime import UTC, datetime

from cronsim import CronSim

from sepp.server.periodic.spec import PeriodicSettings, zone

__all__ = ["Timetable", "rfc3339", "tick_key"]

_S = 1_000_000
#: Forward steps ``latest_at_or_before`` takes from cronsim's reverse answer at most.
_WALK = 64


def rfc3339(us: int) -> str:
    """``us`` (µs UTC, whole seconds kept) as RFC 3339 UTC: ``2026-03-29T01:00:00Z``."""
    return datetime.fromtimestamp(us // _S, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tick_key(name: str, tick_us: int) -> str:
    """The idempotency key of the job of schedule ``name``'s tick at ``tick_us``:
    ``periodic:<name>:<tick time, UTC, RFC 3339>``."""
    return f"periodic:{name}:{rfc3339(tick_us)}"


class Timetable:
    """The tick times of one schedule (see the module docstring); all times µs UTC."""

    __slots__ = ("_cron", "_every", "_tz")

    def __init__(self, spec: PeriodicSettings) -> None:
        self._every = spec.every_seconds * _S
        self._cron = spec.cron
        self._tz = zone(spec.timezone)

    def _local(self, us: int) -> datetime:
        return datetime.fromtimestamp(us // _S, self._tz)

    def next_after(self, us: int) -> int | None:
        """The first tick strictly after ``us``; None when the expression has no tick in
        cronsim's 50-year search window."""
        if self._every:
            return (us // self._every + 1) * self._every
        for moment in CronSim(self._cron, self._local(us)):
            tick = int(moment.timestamp()) * _S
            if tick > us:
                return tick
        return None

    def latest_at_or_before(self, us: int) -> int | None:
        """The last tick at or before ``us``; None when there is none in the search window.

        For cron: cronsim's reverse step gives a start, then forward steps walk to the last
        tick ≤ ``us`` (its reverse step can skip a tick inside a repeated DST hour)."""
        if self._every:
            return us // self._every * self._every
        try:
            start = int(next(CronSim(self._cron, self._local(us), reverse=True)).timestamp()) * _S
        except StopIteration:
            return None
        best = start if start <= us else None
        probe = start - 7 * 86_400 * _S if best is None else start
        for _ in range(_WALK):
            nxt = self.next_after(probe)
            if nxt is None or nxt > us:
                break
            best = probe = nxt
        return best

    def upcoming(self, after: int, count: int) -> list[int]:
        """The next ``count`` ticks strictly after ``after`` (fewer when the window ends)."""
        out: list[int] = []
        at = after
        while len(out) < count:
            nxt = self.next_after(at)
            if nxt is None:
                break
            out.append(nxt)
            at = nxt
        return out
