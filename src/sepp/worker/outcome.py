"""What a handler's return or exception means for its job (the nack directives).

* return                  → ``Ack`` → COMPLETED; the value returned is the job's result
  (``sepp.job_result``: ``None`` none, ``bytes``, a ``sepp.Result``, else JSON), stored with
  the ack. One JSON cannot encode dead-letters the job at once (``returned``: a
  ``dead_letter`` recording a ``ResultError`` — every attempt would return the same kind of
  value); one larger than the queue's ``max_result_bytes`` fails the attempt (a ``retry``
  with the reason)
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
from typing import Any, Literal

from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.transitions import result_too_large_message
from sepp.hard_limits import MAX_DURATION_SECONDS
from sepp.job_result import result_parts
from sepp.wire import seconds_to_duration
from sepp.worker.errors import ResultError

#: Longest error detail sent, bytes (the server keeps at most 16 KiB).
MAX_DETAIL_BYTES = 16 * 1024

OutcomeKind = Literal["completed", "retry", "retry_after", "dead_letter", "released"]


class Retry(Exception):
    """Raise from a handler to retry the job.

    Args:
        message: Recorded as the attempt's error message (may be empty); anything else
            (``Retry(exc)``, say) is recorded as its ``str()``.
        after: Delay before the next delivery, seconds or a ``timedelta``; ``None`` uses the
            queue's exponential backoff. Either way the job dead-letters
            (ATTEMPTS_EXHAUSTED) when this was its last attempt. A delay past the server's
            schedule horizon (``max_schedule_horizon``) is refused by the server; the worker
            then retries the job with the queue's backoff instead (logged at WARNING).

    Raises ``ValueError`` for a negative, non-finite or unrepresentable delay (above
    ``MAX_DURATION_SECONDS``, the wire's longest duration): raised by the handler's own
    ``raise Retry(...)``, it is then the handler's failure (a plain retry).
    """

    def __init__(self, message: object = "", *, after: float | dt.timedelta | None = None) -> None:
        if isinstance(after, dt.timedelta):
            after = after.total_seconds()
        if after is not None and not 0 <= after <= MAX_DURATION_SECONDS:
            raise ValueError(f"Retry(after=...) must be 0 to {MAX_DURATION_SECONDS} seconds, got {after!r}")
        self.after: float | None = None if after is None else float(after)
        self.message = message if isinstance(message, str) else safe_str(message)
        super().__init__(self.message)


class DeadLetter(Exception):
    """Raise from a handler to dead-letter the job now (reason ``NACK_DEAD_LETTER: <reason>``).
    A ``reason`` that is not a ``str`` (``DeadLetter(exc)``, say) is recorded as its ``str()``."""

    def __init__(self, reason: object = "") -> None:
        self.reason = reason if isinstance(reason, str) else safe_str(reason)
        super().__init__(self.reason)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The settle a finished job gets: ``kind``, the delay for ``retry_after`` (seconds),
    the dead-letter ``reason`` and the error (message, detail) for the attempt history; for
    ``completed``, the job's ``result`` (bytes, None = none) and its ``result_encoding``, and
    the ``children`` its handler enqueued (``Job.enqueue_children``; None = none)."""

    kind: OutcomeKind
    delay: float | None = None
    reason: str = ""
    error_message: str = ""
    error_detail: str = ""
    result: bytes | None = None
    result_encoding: str = ""
    children: Children | None = None

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
            if self.result is not None:
                result = ack.result
                result.data = self.result
                result.encoding = self.result_encoding
            if self.children is not None:
                ack.children.extend(self.children.requests)
                if self.children.then is not None:
                    ack.then.CopyFrom(self.children.then)
            return
        item.nack.CopyFrom(self._nack(job_id, lease_id))

    def _nack(self, job_id: str, lease_id: str) -> wpb.NackRequest:
        # Each text at most MAX_DETAIL_BYTES (the server keeps no more): one nack with a huge
        # message must not make its whole Settle batch too large for the server, which would
        # refuse it and every ack in it (the jobs would run again).
        nack = wpb.NackRequest(job_id=job_id, lease_id=lease_id,
                               error=wpb.JobError(message=_truncate(self.error_message),
                                                  detail=_truncate(self.error_detail)))
        if self.kind == "retry":
            nack.retry.SetInParent()
        elif self.kind == "retry_after":
            nack.retry_after.CopyFrom(seconds_to_duration(self.delay or 0.0))
        elif self.kind == "dead_letter":
            nack.dead_letter = _truncate(self.reason)
        else:
            nack.release.SetInParent()
        return nack


COMPLETED = Outcome("completed")


@dataclass(frozen=True, slots=True)
class Children:
    """What a handler gave ``Job.enqueue_children``: the wire ``requests`` of its children in
    order, and of the callback ``then`` (None = none); sent with the ack
    (``AckRequest.children``, ``AckRequest.then``)."""

    requests: tuple[Any, ...]
    then: Any = None


class _OutcomeDraft:
    """``Outcome``'s layout with a plain ``__setattr__`` (``_acked``): a slot store each field,
    where a frozen dataclass's ``__init__`` calls ``object.__setattr__`` per field (a quarter
    of the cost, measured in docs/benchmarks.md "A result's cost, third pass")."""

    __slots__ = Outcome.__slots__
    kind: OutcomeKind
    delay: float | None
    reason: str
    error_message: str
    error_detail: str
    result: bytes | None
    result_encoding: str
    children: Children | None


_new = object.__new__


def _acked(data: bytes, encoding: str) -> Outcome:
    """``Outcome("completed", result=data, result_encoding=encoding)``, the same frozen object,
    filled in as an ``_OutcomeDraft`` (once per job that returned a result;
    ``tests/unit/test_job_result.py`` checks it equals the constructor's)."""
    draft: _OutcomeDraft = _new(_OutcomeDraft)
    draft.kind = "completed"
    draft.delay = None
    draft.reason = draft.error_message = draft.error_detail = ""
    draft.result = data
    draft.result_encoding = encoding
    draft.children = None
    draft.__class__ = Outcome  # type: ignore[assignment]
    return draft  # type: ignore[return-value]


def _truncate(text: str, limit: int = MAX_DETAIL_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (whole characters; a lone surrogate,
    which UTF-8 cannot carry, becomes ``?``); a non-``str`` is taken as its ``str()``."""
    if not isinstance(text, str):
        text = safe_str(text)
    if text.isascii() and len(text) <= limit:
        return text
    raw = text.encode("utf-8", "replace")
    return raw.decode("utf-8") if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def safe_str(value: object) -> str:
    """``str(value)``, or ``"<str() failed: TypeName>"`` when that raises (a handler's exception
    with a broken ``__str__`` must still settle its job, not leave it held)."""
    try:
        return str(value)
    except Exception:
        return f"<str() failed: {type(value).__name__}>"


def describe(exc: BaseException) -> str:
    """``"TypeName: message"`` (or just the type name when the message is empty); never raises
    (``safe_str``)."""
    text = safe_str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def outcome_for_exception(exc: BaseException) -> Outcome:
    """The outcome of a handler that raised ``exc`` (see the module docstring); its texts at
    most ``MAX_DETAIL_BYTES`` each. Never raises: an exception that cannot be read as asked
    (a ``Retry`` subclass that skipped ``Retry.__init__``, say) is a plain retry — its job is
    still settled, not left held while its lease is kept alive."""
    try:
        if isinstance(exc, Retry):
            message = _truncate(exc.message or "retry requested")
            detail = "" if exc.__cause__ is None else _truncate(_format(exc.__cause__))
            if exc.after is None:
                return Outcome("retry", error_message=message, error_detail=detail)
            delay = float(exc.after)
            if not 0 <= delay <= MAX_DURATION_SECONDS:  # changed after Retry.__init__ checked it
                raise ValueError(f"Retry.after {delay!r} is out of range")
            return Outcome("retry_after", delay=delay, error_message=message, error_detail=detail)
        if isinstance(exc, DeadLetter):
            reason = _truncate(exc.reason)
            return Outcome("dead_letter", reason=reason, error_message=reason or "dead-letter requested")
        return Outcome("retry", error_message=_truncate(describe(exc)), error_detail=_truncate(_format(exc)))
    except Exception:
        return Outcome("retry", error_message=_truncate(describe(exc)))


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def returned(value: Any, limit: int | None) -> Outcome:
    """The outcome of a handler that returned ``value``: ``completed`` carrying it as the job's
    result (``sepp.job_result.result_of``; ``COMPLETED`` for ``None``), checked against the
    queue's ``max_result_bytes`` ``limit`` (bytes; ``None`` when the server did not say).
    Never raises: a value JSON cannot encode is a ``dead_letter`` (reason ``NACK_DEAD_LETTER:
    ResultError: …``, as a handler's ``raise DeadLetter(...)`` would be: retrying runs the
    same code to the same kind of value) recording the ``ResultError`` and a traceback with
    the encoder's error as the cause; one over the limit a ``retry`` recording
    ``ResultTooLarge`` — the words the server records when it refuses one."""
    try:
        try:
            parts = result_parts(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ResultError(f"the handler's return value cannot be stored as the job's result: {describe(exc)} "
                              "(return bytes, a sepp.Result, a JSON-encodable value, or None for no result)"
                              ) from exc
    except ResultError as exc:
        why = _truncate(describe(exc))
        return Outcome("dead_letter", reason=why, error_message=why, error_detail=_truncate(_format(exc)))
    if parts is None:
        return COMPLETED
    data, encoding = parts
    size = len(data)
    if limit is not None and size > limit:
        return Outcome("retry", error_message=result_too_large_message(size, limit))
    return _acked(data, encoding)


def no_handler(job_type: str) -> Outcome:
    """Dead-letter a job whose type has no handler in this worker."""
    reason = f"no handler registered for job type {job_type!r}"
    return Outcome("dead_letter", reason=reason, error_message=reason)


def released(why: str) -> Outcome:
    """Give the job back without spending its attempt (worker shutting down)."""
    return Outcome("released", error_message=why)


__all__ = ["COMPLETED", "Children", "DeadLetter", "Outcome", "OutcomeKind", "Retry", "describe", "no_handler",
           "outcome_for_exception", "released", "returned"]
