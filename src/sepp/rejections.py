"""The rejection catalogue as data (docs/errors.md).

One row per code, in validation order: the catalogue name users see
(``PayloadTooLarge``), the wire reason (``PAYLOAD_TOO_LARGE``, the proto enum name)
and the gRPC status a rejected ``Enqueue`` carries.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import grpc

from sepp.api.v1 import common_pb2 as pb


class RejectionCode(enum.StrEnum):
    """Stable catalogue codes; the value is the catalogue name."""

    INVALID_ARGUMENT = "InvalidArgument"
    QUEUE_NAME_INVALID = "QueueNameInvalid"
    JOB_TYPE_INVALID = "JobTypeInvalid"
    UNKNOWN_QUEUE = "UnknownQueue"
    PAYLOAD_TOO_LARGE = "PayloadTooLarge"
    ENCODING_NOT_ALLOWED = "EncodingNotAllowed"
    CUSTOM_ENTRIES_TOO_MANY = "CustomEntriesTooMany"
    CUSTOM_KEY_TOO_LONG = "CustomKeyTooLong"
    CUSTOM_MAP_TOO_LARGE = "CustomMapTooLarge"
    SCHEDULED_TOO_FAR = "ScheduledTooFar"
    IDEMPOTENCY_KEY_TOO_LONG = "IdempotencyKeyTooLong"
    TRACE_CONTEXT_INVALID = "TraceContextInvalid"
    RESULT_TOO_LARGE = "ResultTooLarge"
    DEPENDENCIES_TOO_MANY = "DependenciesTooMany"
    DEPENDENCY_NOT_FOUND = "DependencyNotFound"

    @property
    def reason(self) -> str:
        """The UPPER_SNAKE_CASE wire form (ErrorInfo.reason, proto enum name)."""
        return self.name

    @property
    def grpc_status(self) -> grpc.StatusCode:
        """Status of a rejected single ``Enqueue`` (of a refused ``Ack`` for ResultTooLarge):
        NOT_FOUND for UnknownQueue, else INVALID_ARGUMENT."""
        return CATALOGUE[self].status

    @classmethod
    def from_wire(cls, value: int | str) -> RejectionCode:
        """Decode a proto enum number or an UPPER_SNAKE reason. Raises ``ValueError`` if unknown."""
        name = pb.RejectionCode.Name(value) if isinstance(value, int) else value  # type: ignore[arg-type]
        try:
            return cls[name]
        except KeyError:
            raise ValueError(f"unknown rejection code {value!r}") from None

    def to_wire(self) -> int:
        """The proto ``RejectionCode`` number."""
        return int(pb.RejectionCode.Value(self.name))


class CodedRejection(Protocol):
    """What the server's own readers of a rejection (metrics, periodic schedules, logs) use
    of it: the code number and the message. The wire ``Rejection`` has both; naming only these
    keeps those readers off the generated types."""

    @property
    def code(self) -> int:
        """The proto ``RejectionCode`` number."""

    @property
    def message(self) -> str:
        """The human-readable reason."""


def code_name(code: int) -> str:
    """The UPPER_SNAKE_CASE wire name of a rejection code number (``QUEUE_NAME_INVALID``),
    any number the proto enum knows. Raises ``ValueError`` for one it does not."""
    return pb.RejectionCode.Name(code)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class CatalogueRow:
    """One catalogue row: the code, its gRPC status and what it means."""

    code: RejectionCode
    status: grpc.StatusCode
    when: str


_ROWS = (
    CatalogueRow(RejectionCode.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT,
                 "malformed request: priority outside 0–9, max_attempts < 1 or above the ceiling, "
                 "encoding label too long, non-finite float or empty key in the custom map, "
                 "a custom value with no type, a timestamp out of range"),
    CatalogueRow(RejectionCode.QUEUE_NAME_INVALID, grpc.StatusCode.INVALID_ARGUMENT,
                 "empty, too long, a character outside [A-Za-z0-9._:-], or not starting with a letter/digit"),
    CatalogueRow(RejectionCode.JOB_TYPE_INVALID, grpc.StatusCode.INVALID_ARGUMENT,
                 "empty, too long (UTF-8 bytes), or containing control characters"),
    CatalogueRow(RejectionCode.UNKNOWN_QUEUE, grpc.StatusCode.NOT_FOUND,
                 "strict mode and the queue is not declared"),
    CatalogueRow(RejectionCode.PAYLOAD_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT,
                 "len(payload.data) > the queue's max_payload_bytes"),
    CatalogueRow(RejectionCode.ENCODING_NOT_ALLOWED, grpc.StatusCode.INVALID_ARGUMENT,
                 "the queue has allowed_encodings and the label is not in it"),
    CatalogueRow(RejectionCode.CUSTOM_ENTRIES_TOO_MANY, grpc.StatusCode.INVALID_ARGUMENT,
                 "more custom entries than max_custom_entries"),
    CatalogueRow(RejectionCode.CUSTOM_KEY_TOO_LONG, grpc.StatusCode.INVALID_ARGUMENT,
                 "a custom key longer than max_custom_key_bytes"),
    CatalogueRow(RejectionCode.CUSTOM_MAP_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT,
                 "custom map size > max_custom_bytes"),
    CatalogueRow(RejectionCode.SCHEDULED_TOO_FAR, grpc.StatusCode.INVALID_ARGUMENT,
                 "scheduled_at > now + max_schedule_horizon"),
    CatalogueRow(RejectionCode.IDEMPOTENCY_KEY_TOO_LONG, grpc.StatusCode.INVALID_ARGUMENT,
                 "idempotency key longer than max_idempotency_key_bytes"),
    CatalogueRow(RejectionCode.TRACE_CONTEXT_INVALID, grpc.StatusCode.INVALID_ARGUMENT,
                 "more than max_trace_entries entries, a key over 256 bytes, a value too long, "
                 "or an invalid traceparent"),
    CatalogueRow(RejectionCode.RESULT_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT,
                 "an ack's len(result.data) > the job's queue's max_result_bytes (`Ack` status, `Settle` per "
                 "item): the ack is not applied, the attempt is failed instead and retried per the queue's "
                 "policy with this reason in the job's history"),
    CatalogueRow(RejectionCode.DEPENDENCIES_TOO_MANY, grpc.StatusCode.INVALID_ARGUMENT,
                 "more than 256 distinct job ids in depends_on (docs/workflows.md)"),
    CatalogueRow(RejectionCode.DEPENDENCY_NOT_FOUND, grpc.StatusCode.NOT_FOUND,
                 "an id in depends_on names no stored job (never enqueued, or purged after its retention); "
                 "the message names the id"),
)

#: The catalogue, keyed by code, in validation order.
CATALOGUE: dict[RejectionCode, CatalogueRow] = {row.code: row for row in _ROWS}

#: ErrorInfo domain of every sepp error.
ERROR_DOMAIN = "sepp"


# ----------------------------------------------------------------- every other wire reason


class Reason(enum.StrEnum):
    """Every ErrorInfo reason (domain ``sepp``) the server sends besides the rejection codes
    . The value is the wire form; ``REASONS`` gives status and meaning.

    ``INVALID_ARGUMENT`` is also the rejection code ``InvalidArgument``: the same reason
    serves a malformed job and a request malformed as a whole.
    """

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    ATOMIC_BATCH_REJECTED = "ATOMIC_BATCH_REJECTED"
    OVERLOADED = "OVERLOADED"
    LEASE_MISMATCH = "LEASE_MISMATCH"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    JOB_NOT_FOUND = "JOB_NOT_FOUND"
    QUEUE_NOT_FOUND = "QUEUE_NOT_FOUND"
    IDEMPOTENCY_KEY_NOT_FOUND = "IDEMPOTENCY_KEY_NOT_FOUND"
    JOB_STATE = "JOB_STATE"
    QUEUE_NOT_EMPTY = "QUEUE_NOT_EMPTY"
    QUEUE_LIMIT_REACHED = "QUEUE_LIMIT_REACHED"
    PERIODIC_INVALID = "PERIODIC_INVALID"
    PERIODIC_NOT_FOUND = "PERIODIC_NOT_FOUND"
    WORKFLOW_NOT_FOUND = "WORKFLOW_NOT_FOUND"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    WATCH_BEHIND = "WATCH_BEHIND"

    @property
    def grpc_status(self) -> grpc.StatusCode:
        """The gRPC status a call failing with this reason carries."""
        return REASONS[self].status


@dataclass(frozen=True, slots=True)
class ReasonRow:
    """One wire reason: its gRPC status, the RPCs that send it, what it means and the
    client-side exception it becomes (``sepp.client._core.error_from_status``)."""

    reason: Reason
    status: grpc.StatusCode
    sent_by: str
    when: str
    raises: str


_REASON_ROWS = (
    ReasonRow(Reason.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT,
              "every service; also a per-item SettleResult.error_reason",
              "a request malformed as a whole: empty or over-cap batch, bad reserve/settle/extend/admin "
              "arguments, a StopReserving without worker_id, a bad queue declaration, a bad search filter "
              "(ListJobs job_id, idempotency_key, error_contains, custom); ErrorInfo metadata "
              "field/limit/actual",
              "RejectedError (InvalidArgument); AdminError from the admin client"),
    ReasonRow(Reason.ATOMIC_BATCH_REJECTED, grpc.StatusCode.INVALID_ARGUMENT, "EnqueueAtomic, EnqueueWorkflow",
              "the atomic batch was refused whole, nothing stored; metadata count/listed/first_index and "
              "an AtomicRejections detail", "AtomicEnqueueError"),
    ReasonRow(Reason.OVERLOADED, grpc.StatusCode.RESOURCE_EXHAUSTED,
              "Enqueue, EnqueueBatch, EnqueueAtomic, EnqueueWorkflow",
              "the commit backlog is full, nothing stored; metadata backlog, RetryInfo retry_delay", "Overloaded"),
    ReasonRow(Reason.LEASE_MISMATCH, grpc.StatusCode.FAILED_PRECONDITION, "Settle, ExtendLease",
              "another delivery holds the job (checked first)", "LeaseError (worker)"),
    ReasonRow(Reason.LEASE_EXPIRED, grpc.StatusCode.FAILED_PRECONDITION, "Settle, ExtendLease",
              "the lease ran out, or the job was settled already with another outcome", "LeaseError (worker)"),
    ReasonRow(Reason.JOB_NOT_FOUND, grpc.StatusCode.NOT_FOUND, "Settle, ExtendLease, WaitJobs, AdminService job calls",
              "no job with that id (WaitJobs: metadata job_id; a job deleted after its retention too)",
              "LeaseError (worker); JobNotFound from the producer clients; AdminError from the admin client"),
    ReasonRow(Reason.QUEUE_NOT_FOUND, grpc.StatusCode.NOT_FOUND, "AdminService queue calls",
              "no queue with that name", "AdminError"),
    ReasonRow(Reason.IDEMPOTENCY_KEY_NOT_FOUND, grpc.StatusCode.NOT_FOUND, "AdminService.FindJobByIdempotencyKey",
              "no live idempotency key of that name in the queue", "AdminError"),
    ReasonRow(Reason.JOB_STATE, grpc.StatusCode.FAILED_PRECONDITION, "AdminService.CancelJob, RequeueJob",
              "the job's state does not allow the action", "AdminError"),
    ReasonRow(Reason.QUEUE_NOT_EMPTY, grpc.StatusCode.FAILED_PRECONDITION, "AdminService.DeleteQueue",
              "the queue still holds jobs (or keeps receiving them)", "AdminError"),
    ReasonRow(Reason.QUEUE_LIMIT_REACHED, grpc.StatusCode.FAILED_PRECONDITION, "AdminService.DeclareQueue",
              "declaring one more queue would pass limits.max_queues; metadata field/limit/actual", "AdminError"),
    ReasonRow(Reason.PERIODIC_INVALID, grpc.StatusCode.INVALID_ARGUMENT, "AdminService.DeclarePeriodic",
              "a schedule that cannot run: a bad cron expression or every, an unknown time zone, an "
              "unknown field, or a job its queue would refuse; metadata field/schedule", "AdminError"),
    ReasonRow(Reason.PERIODIC_NOT_FOUND, grpc.StatusCode.NOT_FOUND, "AdminService periodic calls",
              "no periodic schedule with that name", "AdminError"),
    ReasonRow(Reason.WORKFLOW_NOT_FOUND, grpc.StatusCode.NOT_FOUND, "AdminService.GetWorkflow, CancelWorkflow",
              "no stored job carries that workflow id (never enqueued, or every job purged)", "AdminError"),
    ReasonRow(Reason.UNAUTHENTICATED, grpc.StatusCode.UNAUTHENTICATED,
              "every sepp service when auth is on (AdminService only with admin_token alone)",
              "no bearer token, or one that is not configured; metadata role/method",
              "Unauthenticated (transport family, never retried)"),
    ReasonRow(Reason.PERMISSION_DENIED, grpc.StatusCode.PERMISSION_DENIED, "every sepp service when auth is on",
              "a configured token without the role the service needs; metadata role/method/token",
              "PermissionDenied (transport family, never retried)"),
    ReasonRow(Reason.SHUTTING_DOWN, grpc.StatusCode.UNAVAILABLE, "every call that writes",
              "the server is stopping and takes no new work", "Unavailable"),
    ReasonRow(Reason.STORE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, "every call that writes",
              "the store could not write (nothing stored) or its writer stopped mid-call (maybe stored)",
              "Unavailable"),
    ReasonRow(Reason.INTERNAL_ERROR, grpc.StatusCode.INTERNAL, "any RPC",
              "an unexpected server error; metadata method", "ServerError"),
    ReasonRow(Reason.WATCH_BEHIND, grpc.StatusCode.RESOURCE_EXHAUSTED, "WatchJobs",
              "the watcher fell further behind than the server buffers for it (watch_buffer events) and was "
              "cut off; metadata behind/buffer", "WatchBehind (transport family)"),
)

#: Every wire reason besides the rejection codes, with its status and meaning.
REASONS: dict[Reason, ReasonRow] = {row.reason: row for row in _REASON_ROWS}

#: Every ErrorInfo reason the server can send: the rejection codes and ``REASONS``.
WIRE_REASONS: frozenset[str] = frozenset({c.reason for c in RejectionCode} | {str(r) for r in Reason})
