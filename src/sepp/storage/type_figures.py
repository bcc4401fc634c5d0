"""The shapes of the job-type figures at the storage seam.

Per (queue, job_type, minute) a node counts completed, retried and dead-lettered jobs and
the run times (reserve → settle) of the attempts it settled, in memory
(``sepp.server.admin.type_figures.TypeRollup``), and every few seconds *adds* them to two
tables (``job_type_figures``: the counts, the number of timed runs and the longest;
``job_type_runtimes``: how many runs fell into each run-time bucket), the way the
throughput counts reach ``queue_throughput``. Every node adds its own counts to the same
rows (``ON CONFLICT … DO UPDATE SET n = n + excluded.n``; the longest run with max), so a
read shows the whole cluster.

Each count is added twice: to its minute's row (``step`` 1; these serve the last-hour
window and are kept two hours) and to its hour's row (``step`` 60, ``minute`` = the hour's
first minute; these serve the 24-hour window and are kept 25 hours), so a day's read sums
24 rows per job type and bucket, not 1,440.

Internal and unstable, like ``sepp.storage.admin``. Times: minutes are µs // 60,000,000;
run times µs. Bucket numbers are ``sepp.server.admin.type_figures.bucket_of`` (the store
only adds them up).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple

#: The ``step`` of a minute row and of an hour row.
MINUTE_STEP, HOUR_STEP = 1, 60


class TypeMinute(NamedTuple):
    """One (queue, job_type, step, minute) of counts a node adds: jobs that completed, were
    retried (a nack that scheduled another attempt, or a lease that expired with attempts
    left) and were dead-lettered; ``runs`` attempts with a run time, the longest ``run_max``
    µs. ``step`` 1: the minute ``minute``; 60: the hour starting at minute ``minute``."""

    queue: str
    job_type: str
    step: int
    minute: int
    completed: int
    retried: int
    dead_lettered: int
    runs: int
    run_max: int


class TypeRunBucket(NamedTuple):
    """``n`` runs of (queue, job_type) in the minute (``step`` 1) or hour (60) starting at
    ``minute`` whose run time fell into ``bucket``."""

    queue: str
    job_type: str
    step: int
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
    """What the store holds of one queue's job types: ``totals`` {job_type: (the day's totals,
    the hour's totals)}, ``buckets`` {job_type: {bucket: (the day's runs, the hour's runs)}};
    the day from the hour rows, the hour from the minute rows."""

    totals: dict[str, tuple[TypeTotals, TypeTotals]]
    buckets: dict[str, dict[int, tuple[int, int]]]


def read_of(day: dict[str, TypeTotals], hour: dict[str, TypeTotals], day_runs: dict[tuple[str, int], int],
            hour_runs: dict[tuple[str, int], int]) -> TypeFiguresRead:
    """The two windows' sums as one ``TypeFiguresRead`` (a type seen in one window only reads
    zeros in the other)."""
    totals = {t: (day.get(t, TypeTotals()), hour.get(t, TypeTotals())) for t in {*day, *hour}}
    hist: dict[str, dict[int, tuple[int, int]]] = {}
    for key in {*day_runs, *hour_runs}:
        hist.setdefault(key[0], {})[key[1]] = (day_runs.get(key, 0), hour_runs.get(key, 0))
    return TypeFiguresRead(totals, hist)


#: ``read_step(step, since)``: one window's rows of a queue — the totals {job_type: sums} and
#: the run buckets {(job_type, bucket): runs} of its ``step`` rows from minute ``since`` on.
StepRead = Callable[[int, int], Awaitable[tuple[dict[str, TypeTotals], dict[tuple[str, int], int]]]]


async def read_windows(read_step: StepRead, day_minute: int, hour_minute: int) -> TypeFiguresRead:
    """A driver's ``AdminStore.type_figures``: the day from the hour rows since ``day_minute``,
    the hour from the minute rows since ``hour_minute`` (one ``read_step`` each), as one
    ``TypeFiguresRead``."""
    day, day_runs = await read_step(HOUR_STEP, day_minute)
    hour, hour_runs = await read_step(MINUTE_STEP, hour_minute)
    return read_of(day, hour, day_runs, hour_runs)


def prune_steps(keep_minutes_after: int, keep_hours_after: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """What a driver prunes after an add: (step, minute before which rows go) for the minute
    rows and the hour rows."""
    return (MINUTE_STEP, keep_minutes_after), (HOUR_STEP, keep_hours_after)
