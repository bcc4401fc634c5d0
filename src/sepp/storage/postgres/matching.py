"""How many jobs match a listing's filter on PostgreSQL (``AdminStore.count_jobs``:
the dry-run count of a bulk action). The state is a literal in the SQL text so the
planner can use that state's partial index whatever plan it caches."""

from __future__ import annotations

from typing import Any

from sepp.storage.admin import JobQuery
from sepp.storage.postgres.reads import PgReads

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_SQL = ("SELECT count(*) FROM jobs WHERE state = {state} AND queue = $1::text{job_type}"
        " AND coalesce(finished_at, 0) >= $2::bigint AND coalesce(finished_at, 0) < $3::bigint")


async def count_jobs(reads: PgReads, query: JobQuery) -> int:
    """See ``sepp.storage.sqlite.matching.count_jobs`` (the same contract). Raises
    ``ValueError`` without a queue or state."""
    if query.queue is None or query.state is None:
        raise ValueError("count_jobs needs a queue and a state")
    if "\x00" in query.queue or (query.job_type is not None and "\x00" in query.job_type):
        return 0  # PostgreSQL text cannot hold NUL: nothing stored matches
    sql = _SQL.format(state=int(query.state), job_type=" AND job_type = $4::text" if query.job_type is not None
                      else "")
    args: list[Any] = [query.queue, _INT_MIN if query.finished_after is None else query.finished_after,
                       _INT_MAX if query.finished_before is None else query.finished_before]
    if query.job_type is not None:
        args.append(query.job_type)
    value = await reads.fetchval(sql, *args)
    return int(value or 0)
