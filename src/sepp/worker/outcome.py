"""What a handler's return or exception means for its job (SPEC §3 directives).

* return (any value)      → ``Ack`` → COMPLETED
* ``raise Retry(after=s)`` → nack ``retry_after`` (exactly ``s`` seconds), or ``retry``
  (the queue's backoff) when ``after`` is ``None``; dead-letters at ``max_attempts``
* ``raise DeadLetter(why)`` → nack ``dead_letter`` (reason NACK_DEAD_LETTER: why)
* any other exception     → nack ``retry`` with the error message and traceback
* no handler for the type → nack ``dead_letter`` "no handler registered for job type 'x'"
* worker shutting down    → nack ``release`` (the attempt is given back)
"""

from __future__ import annotations

import datetime as dt
import traceback
from dataclasses import dataclass
from typing import Literal

from sepp.api.v1 import worker_pb2 as wpb
from sepp.wire import seconds_to_duration

#: Longest error detail sent, bytes (the server keeps at most 16 KiB, SPEC §3).
MAX_DETAIL_BYTES = 16 * 1024

OutcomeKind = Literal["completed", "retry", "retry_after", "dead_letter", "released"]


class Retry(Exception):
    """Raise from a handler to retry the job.

    Args:
        message: Recorded as the attempt's error message (may be empty).
        after: Delay before the next delivery, seconds or a ``timedelta``; ``None`` uses the
            queue's exponential backoff. Either way the job dead-letters
            (ATTEMPTS_EXHAUSTED) when this was its last attempt.

    Raises ``ValueError`` for a negative delay.
    """

    def __init__(self, message: str = "", *, after: float | dt.timedelta | None = None) -> None:
        if isinstance(after, dt.timedelta):
            after = after.total_seconds()
        if after is not None and not after >= 0:
            raise ValueError(f"Retry(after=...) must be ≥ 0 seconds, got {after!r}")
        self.after: float | None = None if after is None else float(after)
        self.message = message
        super().__init__(message)


class DeadLetter(Exception):
    """Raise from a handler to dead-letter the job now (reason ``NACK_DEAD_LETTER: <reason>``)."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The settle a finished job gets: ``kind``, the delay for ``retry_after`` (seconds),
    the dead-letter ``reason`` and the error (message, detail) for the attempt history."""

    kind: OutcomeKind
    delay: float | None = None
    reason: str = ""
    error_message: str = ""
    error_detail: str = ""

    @property
    def error(self) -> str:
        """The error message, empty for a completed job."""
        return self.error_message

    def to_settle_item(self, job_id: str, lease_id: str) -> wpb.SettleItem:
        """The wire ``SettleItem`` (ack or nack) for this outcome."""
        item = wpb.SettleItem()
        self.fill(item, job_id, lease_id)
        return item

    def fill(self, item: wpb.SettleItem, job_id: str, lease_id: str) -> None:
        """Write this outcome into an empty ``item`` (one of a request's ``items.add()``):
        setting fields in place costs a third of building and copying messages."""
        if self.kind == "completed":
            ack = item.ack
            ack.job_id = job_id
            ack.lease_id = lease_id
            return
        item.nack.CopyFrom(self._nack(job_id, lease_id))

    def _nack(self, job_id: str, lease_id: str) -> wpb.NackRequest:
        nack = wpb.NackRequest(job_id=job_id, lease_id=lease_id,
                               error=wpb.JobError(message=self.error_message, detail=self.error_detail))
        if self.kind == "retry":
            nack.retry.SetInParent()
        elif self.kind == "retry_after":
            nack.retry_after.CopyFrom(seconds_to_duration(self.delay or 0.0))
        elif self.kind == "dead_letter":
            nack.dead_letter = self.reason
        else:
            nack.release.SetInParent()
        return nack


COMPLETED = Outcome("completed")


def _truncate(text: str, limit: int = MAX_DETAIL_BYTES) -> str:
    raw = text.encode("utf-8")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def describe(exc: BaseException) -> str:
    """``"TypeName: message"`` (or just the type name when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def outcome_for_exception(exc: BaseException) -> Outcome:
    """The outcome of a handler that raised ``exc`` (see the module docstring)."""
    if isinstance(exc, Retry):
        detail = "" if exc.__cause__ is None else _truncate(_format(exc.__cause__))
        if exc.after is None:
            return Outcome("retry", error_message=exc.message or "retry requested", error_detail=detail)
        return Outcome("retry_after", delay=exc.after, error_message=exc.message or "retry requested",
                       error_detail=detail)
    if isinstance(exc, DeadLetter):
        return Outcome("dead_letter", reason=exc.reason, error_message=exc.reason or "dead-letter requested")
    return Outcome("retry", error_message=describe(exc), error_detail=_truncate(_format(exc)))


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def no_handler(job_type: str) -> Outcome:
    """Dead-letter a job whose type has no handler in this worker."""
    reason = f"no handler registered for job type {job_type!r}"
    return Outcome("dead_letter", reason=reason, error_message=reason)


def released(why: str) -> Outcome:
    """Give the job back without spending its attempt (worker shutting down)."""
    return Outcome("released", error_message=why)


__all__ = ["COMPLETED", "DeadLetter", "Outcome", "OutcomeKind", "Retry", "describe", "no_handler",
           "outcome_for_exception", "released"]
