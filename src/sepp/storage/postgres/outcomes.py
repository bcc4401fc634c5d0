"""What a wait for jobs reads on the PostgreSQL backend: ``job_outcomes``, one statement on
the read pool for up to ``MAX_WAIT_JOBS`` ids (over the driver's ``PgReads``); and
``job_dependencies``, what a handler's read of its dependencies' outcomes starts from."""

from __future__ import annotations

from collections.abc import Sequence

from sepp.domain.outcomes import JobDependencies, JobOutcome
from sepp.storage.dependencies import unpacked
from sepp.storage.postgres.reads import PgReads
from sepp.storage.postgres.sql import Q

_make = JobOutcome._make


async def job_outcomes(reads: PgReads, job_ids: Sequence[bytes]) -> list[JobOutcome]:
    """``Store.job_outcomes``: the stored jobs among ``job_ids`` (in no particular order; an
    id of no job is left out). Raises ``StoreUnavailable`` / ``StoreError`` as any read."""
    ids = list(dict.fromkeys(job_ids))
    if not ids:
        return []
    return [_make(tuple(row)) for row in await reads.fetch(Q["job_outcomes"], ids)]


#: A job's state, lease id and ``depends_on`` column, by id.
_DEPENDENCIES = "SELECT state, lease_id, depends_on FROM jobs WHERE id = $1"


async def job_dependencies(reads: PgReads, job_id: bytes) -> JobDependencies | None:
    """``Store.job_dependencies``: one statement on the read pool. Raises
    ``StoreUnavailable`` / ``StoreError`` as any read."""
    row = await reads.fetchrow(_DEPENDENCIES, job_id)
    if row is None:
        return None
    state, lease_id, column = row
    return JobDependencies(state, None if lease_id is None else bytes(lease_id),
                           unpacked(None if column is None else bytes(column)))
