"""Throughput per (queue, minute) counted in memory (the admin stats).

Enqueues, completions and dead letters are counted through the engine events
(``ServerParts.events``: ``stored`` / ``finished``) and folded into the store's
``queue_throughput`` table by the admin engine's flush loop, so no job write carries a
statistics write (documented choice: a crash loses at most one flush interval).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.domain.records import Dedups, JobRow

#: One minute in µs: the bucket of the throughput series.
MINUTE_US = 60_000_000


class ThroughputCounter:
    """Throughput per (queue, minute) not yet written to the store: enqueued, completed and
    dead-lettered counts (columns 0, 1, 2), kept in memory so neither the enqueue nor the
    settle path writes a statistics row per job. ``clock`` dates the finished counts (an
    enqueue is dated by its rows' ``enqueued_at``)."""

    ENQUEUED, COMPLETED, DEAD_LETTERED = 0, 1, 2

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock_now = clock.now
        self.pending: Counter[tuple[str, int, int]] = Counter()

    def on_stored(self, rows: Sequence[JobRow], dedups: Dedups) -> None:
        """``events.stored`` hook: count the rows that were really stored."""
        if not rows:
            return
        minute = rows[0].enqueued_at // MINUTE_US  # one call = one ``now``
        first = rows[0].queue
        if all(r.queue == first for r in rows):
            self.pending[(first, minute, 0)] += len(rows) - len(dedups)
            return
        counts = Counter(r.queue for r in rows)
        for i in dedups:
            counts[rows[i].queue] -= 1
        for queue, n in counts.items():
            self.pending[(queue, minute, 0)] += n

    def on_finished(self, queue: str, state: int, count: int) -> None:
        """``events.finished`` hook: jobs of ``queue`` reached COMPLETED (4) or DEAD_LETTERED (5)."""
        column = self.COMPLETED if state == 4 else self.DEAD_LETTERED
        self.pending[(queue, self._clock_now() // MINUTE_US, column)] += count

    def take(self) -> dict[tuple[str, int], tuple[int, int, int]]:
        """Hand over and forget the pending counts: {(queue, minute): (enqueued, completed, dead)}."""
        out: dict[tuple[str, int], list[int]] = {}
        for (queue, minute, column), n in self.pending.items():
            if n:
                out.setdefault((queue, minute), [0, 0, 0])[column] += n
        self.pending.clear()
        return {k: (v[0], v[1], v[2]) for k, v in out.items()}

    def restore(self, counts: Mapping[tuple[str, int], tuple[int, int, int]]) -> None:
        """Put counts back after a failed flush."""
        for (queue, minute), values in counts.items():
            for column, n in enumerate(values):
                self.pending[(queue, minute, column)] += n

    def forget(self, queue: str) -> None:
        """Drop a deleted queue's counts."""
        for key in [k for k in self.pending if k[0] == queue]:
            del self.pending[key]
