"""Errors the engine raises; ``rpc.status`` turns each into its wire status."""

from __future__ import annotations

from collections.abc import Sequence

from sepp.api.v1 import common_pb2 as pb
from sepp.quoting import quote
from sepp.rejections import Reason
from sepp.storage.base import SettleError


class EngineError(Exception):
    """Root of the engine's errors."""


class JobRejected(EngineError):
    """One job failed validation; carries the catalogue ``Rejection``."""

    def __init__(self, rejection: pb.Rejection) -> None:
        super().__init__(rejection.message)
        self.rejection = rejection


class AtomicRejected(EngineError):
    """An atomic batch failed validation; nothing was stored. Carries every (index, rejection)."""

    def __init__(self, rejections: Sequence[pb.IndexedRejection]) -> None:
        super().__init__(f"{len(rejections)} job(s) rejected")
        self.rejections = list(rejections)


class InvalidRequest(EngineError):
    """A request is malformed as a whole (empty or over-cap batch, bad reserve arguments).

    Sent as INVALID_ARGUMENT with ErrorInfo reason INVALID_ARGUMENT and metadata
    ``field``/``limit``/``actual``: ``limit`` is the bound that was crossed, ``actual`` the
    value given (numbers are written by ``sepp.limits.fmt_number``; a string is sent as is,
    e.g. a Duration's exact seconds).
    """

    def __init__(self, message: str, field: str, limit: float | str | None = None,
                 actual: float | str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.limit = limit
        self.actual = actual


class BacklogFull(EngineError):
    """The commit backlog is full (``backlog`` writes waiting, the ``max_commit_backlog``
    bound): nothing was stored; retry after ``retry_after`` seconds. Sent as
    RESOURCE_EXHAUSTED with ErrorInfo reason ``OVERLOADED``, which a client raises as
    ``sepp.errors.Overloaded`` (the one class of that name)."""

    def __init__(self, retry_after: float, backlog: int) -> None:
        super().__init__("overloaded")
        self.retry_after = retry_after
        self.backlog = backlog


class LeaseRefused(EngineError):
    """A settle or extend was refused: JOB_NOT_FOUND, LEASE_MISMATCH or LEASE_EXPIRED."""

    def __init__(self, error: SettleError, job_id: str) -> None:
        super().__init__(f"{error.value} for job {job_id}")
        self.error = error
        self.job_id = job_id


class NotFound(EngineError):
    """A job, queue or idempotency key does not exist; ``reason`` is its catalogue reason
    (``JOB_NOT_FOUND``, ``QUEUE_NOT_FOUND``, ``IDEMPOTENCY_KEY_NOT_FOUND``); ``metadata``
    goes into the ErrorInfo (``job_id`` for a wait's unknown job)."""

    def __init__(self, what: str, reason: Reason, metadata: dict[str, str] | None = None) -> None:
        super().__init__(what)
        self.reason = reason
        self.metadata = metadata


class QueueLimitReached(EngineError):
    """Creating one more queue would exceed the server's ``limits.max_queues``.
    Sent as FAILED_PRECONDITION with ErrorInfo reason ``QUEUE_LIMIT_REACHED`` and metadata
    ``limit`` / ``actual`` (docs/decisions.md "A limit on the number of queues")."""

    def __init__(self, name: str, limit: int, actual: int) -> None:
        super().__init__(f"cannot create queue {quote(name)}: the server holds {actual} queues, its limit "
                         f"(limits.max_queues = {limit}); delete unused queues (sepp queues delete NAME) or raise "
                         "[limits] max_queues in the server's config (SEPP_LIMITS__MAX_QUEUES)")
        self.limit = limit
        self.actual = actual


class PeriodicInvalid(EngineError):
    """A periodic schedule that cannot run: ``field`` is the offending field
    (``cron``, ``timezone``, ``every``, an unknown field's name, or the job field its queue
    refuses), ``schedule`` the schedule's name. Sent as INVALID_ARGUMENT with ErrorInfo
    reason ``PERIODIC_INVALID`` and metadata ``field`` / ``schedule``."""

    def __init__(self, message: str, field: str, schedule: str) -> None:
        super().__init__(message)
        self.field = field
        self.schedule = schedule


class ShuttingDown(EngineError):
    """The server is stopping and takes no new work."""
