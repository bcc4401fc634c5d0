"""What comes back for each job sent: an ``EnqueueAck`` (stored, or matched by idempotency
key) or a ``Rejection`` (refused: fix the request, don't retry). Frozen dataclasses, no I/O,
built from wire messages with ``from_proto``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from sepp.api.v1 import common_pb2 as pb
from sepp.rejections import RejectionCode

_new = object.__new__


@dataclass(frozen=True, slots=True)
class EnqueueAck:
    """A job the server stored durably, or matched by idempotency key.

    Attributes:
        job_id: Server-assigned UUID (canonical text form).
        deduplicated: True when the idempotency key matched a job already enqueued in
            the queue's dedup window; ``job_id`` is then the original job.
    """

    job_id: str
    deduplicated: bool = False

    def __init__(self, job_id: str, deduplicated: bool = False) -> None:
        # Written out rather than generated: slot setters cost half of ``object.__setattr__``.
        _ACK_SET[0](self, job_id)
        _ACK_SET[1](self, deduplicated)

    @classmethod
    def from_proto(cls, msg: pb.EnqueueAck) -> EnqueueAck:
        """Build from a wire ``EnqueueAck``."""
        return cls(msg.job_id, bool(msg.deduplicated))


_ACK_SET = tuple(EnqueueAck.__dict__[f.name].__set__ for f in dataclasses.fields(EnqueueAck))


class _AckDraft:
    """``EnqueueAck``'s layout with a plain ``__setattr__`` (``_fill``)."""

    __slots__ = EnqueueAck.__slots__
    job_id: str
    deduplicated: bool


def fresh_acks(job_ids: Iterable[str]) -> list[EnqueueAck]:
    """``[EnqueueAck(job_id) for job_id in job_ids]`` (``deduplicated`` false), built without a
    constructor call per ack (``_fill``): what a batch answer of fresh acks becomes."""
    out: list[EnqueueAck] = []
    append = out.append
    for job_id in job_ids:
        draft = _new(_AckDraft)
        draft.job_id = job_id
        draft.deduplicated = False
        draft.__class__ = EnqueueAck  # type: ignore[assignment]
        append(draft)  # type: ignore[arg-type]
    return out


@dataclass(frozen=True, slots=True)
class Rejection:
    """A deterministic refusal of one job (docs/errors.md): fix the request, don't retry.

    Attributes:
        code: The catalogue code (``RejectionCode.PAYLOAD_TOO_LARGE`` …).
        message: Human-readable explanation.
        field: The request field at fault (``"payload.data"``, ``"custom[user_id]"``), or "".
        limit: The limit crossed, when the check has one (bytes, entries or seconds).
        actual: The measured value, in the unit of ``limit``.
    """

    code: RejectionCode
    message: str = ""
    field: str = ""
    limit: int | None = None
    actual: int | None = None

    def __str__(self) -> str:
        details = []
        if self.field:
            details.append(f"field {self.field}")
        if self.limit is not None:
            details.append(f"limit {self.limit}")
        if self.actual is not None:
            details.append(f"actual {self.actual}")
        text = f"{self.code.value}: {self.message}" if self.message else self.code.value
        return f"{text} ({', '.join(details)})" if details else text

    @classmethod
    def from_proto(cls, msg: pb.Rejection) -> Rejection:
        """Build from a wire ``Rejection``.

        A code this client does not know (a newer server) becomes ``InvalidArgument``
        with the number kept in the message, so it still reads as a rejection.
        """
        message = msg.message
        try:
            code = RejectionCode.from_wire(int(msg.code))
        except ValueError:
            code = RejectionCode.INVALID_ARGUMENT
            message = f"[unknown rejection code {int(msg.code)}] {message}"
        return cls(
            code=code,
            message=message,
            field=msg.field,
            limit=msg.limit if msg.HasField("limit") else None,
            actual=msg.actual if msg.HasField("actual") else None,
        )

    def to_proto(self) -> pb.Rejection:
        """The wire ``Rejection``."""
        msg = pb.Rejection(code=self.code.to_wire(), message=self.message, field=self.field)  # type: ignore[arg-type]
        if self.limit is not None:
            msg.limit = self.limit
        if self.actual is not None:
            msg.actual = self.actual
        return msg


@dataclass(frozen=True, slots=True)
class IndexedRejection:
    """A rejection tagged with the 0-based index of its job in the call (request order)."""

    index: int
    rejection: Rejection

    def __str__(self) -> str:
        return f"job {self.index}: {self.rejection}"

    @classmethod
    def from_proto(cls, msg: pb.IndexedRejection) -> IndexedRejection:
        """Build from a wire ``IndexedRejection``."""
        return cls(int(msg.index), Rejection.from_proto(msg.rejection))


#: One slot of :meth:`Client.enqueue_batch`'s result: an ack or a rejection.
BatchResult = EnqueueAck | Rejection


__all__ = ["BatchResult", "EnqueueAck", "IndexedRejection", "Rejection", "fresh_acks"]
