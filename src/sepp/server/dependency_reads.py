"""A reserved job's handler reads the outcomes of the jobs it depends on
(``WorkerService.DependencyOutcomes``; docs/workflows.md "Reading the dependencies' results").

The ids come from the job's own row (its ``depends_on`` column: every id it was enqueued
with, in order, a workflow node's edges first — kept for as long as the job is, while the
edges of ``job_waits`` go with the release), the outcomes from the rows of those jobs
(``Store.job_outcomes``, the read a wait makes). Nothing is written and nothing parks: two
reads, only when a handler asks, so a job without dependencies costs nothing more than before.

Only the holder of the job's current lease may read (the worker service's ``work`` role
alone would let any worker read any job's results): a job not RESERVED under that lease is
``LeaseRefused`` (LEASE_MISMATCH), an unknown one ``LeaseRefused`` (JOB_NOT_FOUND). An
answer holds as many outcomes as fit ``limits.max_message_bytes`` (at least one); the caller
asks again from where it stopped (``offset``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.domain.outcomes import JobOutcome
from sepp.domain.params import SettleError
from sepp.domain.states import State
from sepp.hard_limits import MAX_WAIT_JOBS, KiB
from sepp.quoting import clip
from sepp.server.errors import InvalidRequest, LeaseRefused
from sepp.server.parts import EngineService

_RESERVED = int(State.RESERVED)
#: Room left in an answer for everything but the outcomes, bytes.
_ANSWER_SLACK = 64 * KiB


class DependencyReads(EngineService):
    """``dependency_outcomes`` over the parts' store (see the module docstring)."""

    async def dependency_outcomes(self, job_id: str, lease_id: str,
                                  offset: int = 0) -> tuple[int, list[tuple[bytes, JobOutcome | None]]]:
        """``(total, outcomes)``: ``total`` the number of jobs ``job_id`` (canonical UUID text)
        depends on, ``outcomes`` the ``(id, outcome)`` of ``depends_on[offset:]`` in order, as
        many as fit one answer (at least one while ``offset < total``); ``outcome`` is None for
        a dependency no longer stored (purged after its retention, or deleted).

        Raises ``InvalidRequest`` (field ``job_id``, ``lease_id`` or ``offset``: not a UUID, a
        negative offset) and ``LeaseRefused`` (JOB_NOT_FOUND: no such job; LEASE_MISMATCH:
        the job is not RESERVED under ``lease_id``)."""
        raw = _uuid(job_id, "job_id")
        lease = _uuid(lease_id, "lease_id")
        if offset < 0:
            raise InvalidRequest(f"offset must not be negative (got {offset})", "offset", 0, offset)
        deps = await self.store.job_dependencies(raw)
        if deps is None:
            raise LeaseRefused(SettleError.NOT_FOUND, job_id_text(raw))
        if deps.state != _RESERVED or deps.lease_id != lease:
            raise LeaseRefused(SettleError.LEASE_MISMATCH, job_id_text(raw))
        ids = deps.depends_on
        budget = max(self.limits.max_message_bytes - _ANSWER_SLACK, 1)
        out: list[tuple[bytes, JobOutcome | None]] = []
        for start in range(offset, len(ids), MAX_WAIT_JOBS):  # one read per 1,000 ids, as a wait's
            chunk = ids[start:start + MAX_WAIT_JOBS]
            rows = {row.id: row for row in await self.store.job_outcomes(chunk)}
            budget = _fill(out, chunk, rows, budget)
            if budget < 0:
                break
        return len(ids), out


def _uuid(text: str, field: str) -> bytes:
    raw = job_id_bytes(text)
    if raw is None:
        raise InvalidRequest(f"{field} {clip(repr(text), 64)} is not a UUID", field)
    return raw


def _size(outcome: JobOutcome | None) -> int:
    return 64 if outcome is None else outcome.size()


def _fill(out: list[tuple[bytes, JobOutcome | None]], chunk: Sequence[bytes], rows: dict[bytes, JobOutcome],
          budget: int) -> int:
    """Append the outcomes of ``chunk`` to ``out`` while ``budget`` (bytes) lasts — the first
    one of an answer always; the budget left, negative once one did not fit (not appended)."""
    for dep in chunk:
        outcome = rows.get(dep)
        budget -= _size(outcome)
        if out and budget < 0:
            return budget
        out.append((dep, outcome))
    return budget


__all__ = ["DependencyReads"]
