"""Errors of the worker side, rooted in :class:`sepp.errors.SeppError`.

::

    SeppError
    ├── RefusedError  (the rejection family, sepp.errors)
    │   └── LeaseError    a settle or extend was refused: the job's lease no longer holds
    └── ResultError   a handler's return value could not be its job's result

Transport failures of worker calls are the client's ``TransportError`` family
(``Unavailable``, ``DeadlineExceeded``, ``ServerError`` …), converted by the same code.
"""

from __future__ import annotations

from sepp.errors import RefusedError, SeppError
from sepp.rejections import Reason

#: ErrorInfo reasons the server gives for a refused settle or extend.
LEASE_REASONS: frozenset[str] = frozenset({Reason.LEASE_MISMATCH, Reason.LEASE_EXPIRED, Reason.JOB_NOT_FOUND})


class LeaseError(RefusedError):
    """The server refused a settle or extend because the lease no longer holds.

    ``reason`` is ``LEASE_MISMATCH`` (another delivery holds the job: checked first),
    ``LEASE_EXPIRED`` (the lease ran out, or the job was already settled with another
    outcome) or ``JOB_NOT_FOUND``; ``job_id`` is the job's id.
    """

    def __init__(self, reason: str, job_id: str, message: str | None = None) -> None:
        self.reason = reason
        self.job_id = job_id
        super().__init__(message or f"{reason} for job {job_id}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.reason, self.job_id, self.message))


class ResultError(SeppError):
    """A handler's return value could not become its job's result: JSON cannot encode it, or it
    is larger than the queue's ``max_result_bytes``. The runtime raises it after the handler
    returned, in the handler's place. One JSON cannot encode dead-letters the job at once
    (reason ``NACK_DEAD_LETTER: ResultError: …``: every attempt would fail the same way); this
    message and its traceback (with the encoder's error as its cause) are in the job's
    history. The worker goes on with its other jobs."""


__all__ = ["LEASE_REASONS", "LeaseError", "ResultError"]
