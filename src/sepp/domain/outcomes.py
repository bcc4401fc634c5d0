"""What a wait for jobs reads of each job: ``JobOutcome``.

A producer waiting for jobs (``WaitJobs``) is answered from the stored state alone: the row
a store reads for each id (``Store.job_outcomes``) says whether the job is finished and, when
it is, everything the caller learns of it — its state, result, attempts and when it ended.
Times are µs since the Unix epoch (UTC); ids 16-byte blobs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sepp.domain.records import attempt_entries
from sepp.domain.states import FINISHED

#: The finished states as numbers: a wait answers a job once it is in one of them.
FINISHED_STATES = frozenset(int(s) for s in FINISHED)


class JobOutcome(NamedTuple):
    """One job as a wait reads it, in the column order of the stores' ``job_outcomes`` read.

    ``history`` is read only for a finished job (None otherwise: a wait re-reads unfinished
    jobs often and needs only their state and queue). ``result`` / ``result_encoding`` are
    the job's result (the handler's return value) and its encoding label, None when it has
    none; the stores select them in the same read.
    """

    id: bytes
    queue: str
    job_type: str
    state: int
    attempt: int
    finished_at: int | None
    reason: str | None
    history: str | None
    worker_id: str | None
    node: str | None
    started_at: int | None
    result: bytes | None = None
    result_encoding: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the job is COMPLETED, DEAD_LETTERED or CANCELLED."""
        return self.state in FINISHED_STATES

    def attempt_entries(self) -> list[dict[str, Any]]:
        """The attempt history, oldest first (``records.attempt_entries``: the completing
        attempt of a COMPLETED job included)."""
        return attempt_entries(self.state, self.history, self.attempt, self.worker_id, self.node, self.started_at,
                               self.finished_at)

    def last_error(self) -> str:
        """The ``error_message`` of the last attempt that recorded one, "" when none did."""
        for entry in reversed(self.attempt_entries()):
            if entry.get("error_message"):
                return str(entry["error_message"])
        return ""

    def size(self) -> int:
        """Roughly the bytes this outcome takes in an answer (its history, its result and
        a little more): what an answer's budget is counted in."""
        return 256 + len(self.history or "") + len(self.result or b"") + len(self.reason or "")


class JobDependencies(NamedTuple):
    """What a reserved job's handler needs to read its dependencies' outcomes
    (``Store.job_dependencies``; docs/workflows.md "Reading the dependencies' results"): the
    job's ``state`` and current ``lease_id`` (16 bytes, None when never leased), which fence
    the read to the lease holder, and ``depends_on``, the 16-byte ids it was enqueued with, in
    order (a workflow node's edges first, then its own ``depends_on``; [] when none). The ids
    are kept on the job for as long as it is: the release deletes only the edges."""

    state: int
    lease_id: bytes | None
    depends_on: list[bytes]


__all__ = ["FINISHED_STATES", "JobDependencies", "JobOutcome"]
