"""The shapes of the job-type figures at the storage seam (issue 13 item 2).

Per (queue, job_type, minute) a node counts completed, retried and dead-lettered jobs and
the run times (reserve → settle) of the attempts it settled, in memory
(``sepp.server.admin.type_figures.TypeRollup``), and every few seconds *adds* them to two
tables (``job_type_figures``: the counts, the number of timed runs and the longest;
``job_type_runtimes``: how many runs fell into each run-time bucket), the way the
throughput counts reach ``queue_throughput``. Every node adds its own counts to the same
rows (``ON CONFLICT … DO UPDATE SET n = n + excluded.n``; the longest run with max), so a
read shows the whole cluster. Rows older than a day are dropped.

Internal and unstable, like ``sepp.storage.admin``. Times: minutes are µs // 60,000,000;
run times µs. Bucket numbers are ``sepp.server.admin.type_figures.bucket_of`` (the store
only adds them up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class TypeMinute(NamedTuple):
    """One (queue, job_type, minute) of counts a node adds: jobs that completed, were retried
    (a nack that scheduled another attempt, or a lease that expired with attempts left) and
    were dead-lettered; ``runs`` attempts with a run time, the longest ``run_max`` µs."""

    queue: str
    job_type: str
    minute: int
    completed: int
    retried: int
    dead_lettered: int
    runs: int
    run_max: int


class TypeRunBucket(NamedTuple):
    """``n`` runs of (queue, job_type) in ``minute`` whose run time fell into ``bucket``."""

    queue: str
    job_type: str
    minute: int
    bucket: int
    n: int


@dataclass(frozen=True, slots=True)
class TypeTotals:
    """The figures of one job type over one window: counts, timed runs and the longest run
    (µs; 0 when none)."""

    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    runs: int = 0
    run_max: int = 0


@dataclass(frozen=True, slots=True)
class TypeFiguresRead:
    """What the store holds of one queue's job types since a day ago: ``totals`` {job_type:
    (the day's totals, the hour's totals)}, ``buckets`` {job_type: {bucket: (the day's runs,
    the hour's runs)}}."""

    totals: dict[str, tuple[TypeTotals, TypeTotals]]
    buckets: dict[str, dict[int, tuple[int, int]]]
