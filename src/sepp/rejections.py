"""The rejection catalogue as data (SPEC §2 "Rejection catalogue").

One row per code, in validation order: the catalogue name users see
(``PayloadTooLarge``), the wire reason (``PAYLOAD_TOO_LARGE``, the proto enum name)
and the gRPC status a rejected ``Enqueue`` carries.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import grpc

from sepp.api.v1 import common_pb2 as pb


class RejectionCode(enum.StrEnum):
    """Stable catalogue codes; the value is the catalogue name (seed wording)."""

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

    @property
    def reason(self) -> str:
        """The UPPER_SNAKE_CASE wire form (ErrorInfo.reason, proto enum name)."""
        return self.name

    @property
    def grpc_status(self) -> grpc.StatusCode:
        """Status of a rejected single ``Enqueue``: NOT_FOUND for UnknownQueue, else INVALID_ARGUMENT."""
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
)

#: The catalogue, keyed by code, in validation order.
CATALOGUE: dict[RejectionCode, CatalogueRow] = {row.code: row for row in _ROWS}

#: ErrorInfo domain of every sepp error.
ERROR_DOMAIN = "sepp"
