"""How many jobs match a listing's filter on SQLite (``AdminStore.count_jobs``:
the dry-run count of a bulk action). The state is written into the SQL as a literal so
SQLite can use the partial index of that state (a bound parameter cannot prove a partial
index's WHERE); the job-type filter is only in the text when given."""

from __future__ import annotations

from typing import Any

from sepp.storage.admin import JobQuery
from sepp.storage.sqlite.reads import SQLiteReads

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_SQL = ("SELECT count(*) FROM jobs WHERE state = {state} AND queue = :queue{job_type}"
        " AND coalesce(finished_at, 0) >= :after AND coalesce(finished_at, 0) < :before")


async def count_jobs(reads: SQLiteReads, query: JobQuery) -> int:
    """Jobs of ``query.queue`` in ``query.state`` (both required) of ``query.job_type`` (any
    when None) whose finish time lies in [finished_after, finished_before) (unbounded sides
    when None; an unfinished job counts as finished at 0). Raises ``ValueError`` without a
    queue or state."""
    if query.queue is None or query.state is None:
        raise ValueError("count_jobs needs a queue and a state")
    sql = _SQL.format(state=int(query.state), job_type=" AND job_type = :job_type" if query.job_type is not None
                      else "")
    params: Any = {"queue": query.queue, "job_type": query.job_type,
                   "after": _INT_MIN if query.finished_after is None else query.finished_after,
                   "before": _INT_MAX if query.finished_before is None else query.finished_before}
    if query.job_type is None:
        del params["job_type"]
    row = await reads.read(sql, params, True)
    return int(row[0]) if row is not None else 0
