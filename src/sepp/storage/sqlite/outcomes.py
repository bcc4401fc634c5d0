"""What a wait for jobs reads on the SQLite backend: ``job_outcomes``, one read of up to
``MAX_WAIT_JOBS`` ids on a reader thread (over the driver's ``SQLiteReads``); and
``job_dependencies``, what a handler's read of its dependencies' outcomes starts from."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import lru_cache

from sepp.domain.outcomes import JobDependencies, JobOutcome
from sepp.storage.dependencies import unpacked
from sepp.storage.errors import StoreError
from sepp.storage.sqlite.reads import SQLiteReads
from sepp.storage.sqlite.sql import Q

_make = JobOutcome._make


@lru_cache(maxsize=64)
def outcomes_sql(n: int) -> str:
    """The ``job_outcomes`` read of ``n`` ids: its ``IN (?)`` widened to ``n`` parameters."""
    head, sep, tail = Q["job_outcomes"].rpartition("IN (?)")
    assert sep, "job_outcomes must end its WHERE with IN (?)"
    return f"{head}IN ({', '.join('?' * n)}){tail}"


async def job_outcomes(reads: SQLiteReads, job_ids: Sequence[bytes]) -> list[JobOutcome]:
    """``Store.job_outcomes``: the stored jobs among ``job_ids`` (in no particular order; an
    id of no job is left out). Raises ``StoreError`` when SQLite cannot read."""
    ids = list(dict.fromkeys(job_ids))
    if not ids:
        return []
    try:
        rows = await reads.read(outcomes_sql(len(ids)), ids)
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite: {exc}") from exc
    return [_make(row) for row in rows]


#: A job's state, lease id and ``depends_on`` column, by id.
_DEPENDENCIES = "SELECT state, lease_id, depends_on FROM jobs WHERE id = ?"


async def job_dependencies(reads: SQLiteReads, job_id: bytes) -> JobDependencies | None:
    """``Store.job_dependencies``: one read on a reader thread. Raises ``StoreError`` when
    SQLite cannot read."""
    try:
        row = await reads.read(_DEPENDENCIES, (job_id,), one=True)
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite: {exc}") from exc
    if row is None:
        return None
    state, lease_id, column = row
    return JobDependencies(state, None if lease_id is None else bytes(lease_id), unpacked(column))
