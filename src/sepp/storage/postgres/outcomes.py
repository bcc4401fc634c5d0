"""What a wait for jobs reads on the PostgreSQL backend: ``job_outcomes``, one statement on
the read pool for up to ``MAX_WAIT_JOBS`` ids (over the driver's ``PgReads``)."""

from __future__ import annotations

from collections.abc import Sequence

from sepp.domain.outcomes import JobOutcome
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
