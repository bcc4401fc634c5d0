"""Commit timings a store keeps for ``/metrics`` (``sepp_commit_batch_jobs``,
``sepp_commit_duration_seconds``).

A committer calls ``CommitStats.observe(jobs, seconds)`` once per committed write transaction
(O(1): two ``bisect`` calls and a few additions, ~0.3 µs). The counts are cumulative and never
drained, so any number of scrapes read them without losing or double-counting anything; a
store hands them out as a ``CommitHistograms`` snapshot (``Store.figures``). The SQLite writer
process sends its snapshot with every results frame (a few dozen ints), so the parent always
holds the child's latest figures.

``jobs`` is the weight of the transaction's operations (jobs enqueued, settled or leased;
sweeps and admin writes weigh 0); ``seconds`` the wall time of the commit itself (SQLite:
``COMMIT``, plus the WAL ``fdatasync`` on the lone-write path; PostgreSQL: the ``COMMIT`` round
trip, or the whole statement of an autocommit group), i.e. the fsync'd part.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

#: Upper bounds of ``sepp_commit_batch_jobs`` (jobs per committed transaction).
JOBS_BUCKETS: tuple[float, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 16384)
#: Upper bounds of ``sepp_commit_duration_seconds``.
SECONDS_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25, 0.5, 1.0, 2.5, 5.0)


class CommitHistograms(NamedTuple):
    """A snapshot of ``CommitStats``: per-bucket counts (not cumulative; one more than the
    bounds: the last is +Inf) and the sums, for ``JOBS_BUCKETS`` and ``SECONDS_BUCKETS``."""

    jobs_counts: tuple[int, ...]
    jobs_sum: float
    seconds_counts: tuple[int, ...]
    seconds_sum: float


#: No commit observed yet.
EMPTY = CommitHistograms((0,) * (len(JOBS_BUCKETS) + 1), 0.0, (0,) * (len(SECONDS_BUCKETS) + 1), 0.0)


class CommitStats:
    """Cumulative commit histograms of one committer (see the module docstring). Not locked:
    each instance is written by one thread (the committer's) and read as a whole by
    ``snapshot`` (a torn read can only be one commit behind in one of the two histograms)."""

    __slots__ = ("_jobs", "_jobs_sum", "_secs", "_secs_sum")

    def __init__(self) -> None:
        self._jobs = [0] * (len(JOBS_BUCKETS) + 1)
        self._secs = [0] * (len(SECONDS_BUCKETS) + 1)
        self._jobs_sum = 0.0
        self._secs_sum = 0.0

    def observe(self, jobs: int, seconds: float) -> None:
        """One committed transaction of ``jobs`` jobs whose commit took ``seconds``."""
        self._jobs[bisect_left(JOBS_BUCKETS, jobs)] += 1
        self._jobs_sum += jobs
        self._secs[bisect_left(SECONDS_BUCKETS, seconds)] += 1
        self._secs_sum += seconds

    def snapshot(self) -> CommitHistograms:
        """The counts so far."""
        return CommitHistograms(tuple(self._jobs), self._jobs_sum, tuple(self._secs), self._secs_sum)


def merge(a: CommitHistograms, b: CommitHistograms) -> CommitHistograms:
    """The sum of two snapshots (a store with two commit paths: committer and lone writes)."""
    return CommitHistograms(tuple(x + y for x, y in zip(a.jobs_counts, b.jobs_counts, strict=True)),
                            a.jobs_sum + b.jobs_sum,
                            tuple(x + y for x, y in zip(a.seconds_counts, b.seconds_counts, strict=True)),
                            a.seconds_sum + b.seconds_sum)
