"""sepp's exceptions: one root, two families that never mix (STYLE habit 7).

::

    SeppError
    ├── RefusedError             the rejection family: deterministic, fix the request, never retried
    │   ├── RejectedError        a job broke a catalogue rule (``.rejection``)
    │   │   └── AtomicEnqueueError   an atomic batch refused whole, every failure by index
    │   ├── AdminRefused         an admin request refused (also ``AdminError``: code, reason, metadata)
    │   ├── JobNotFound          a job waited for does not exist (``.job_id``)
    │   └── LeaseError           (sepp.worker.errors) a settle or extend found the lease gone
    ├── JobOutcomeError          a job waited for ended without a result (``.outcome``)
    │   ├── JobFailed            it was dead-lettered (``.last_error``, ``.attempts``)
    │   └── JobCancelled         an admin cancelled it
    └── TransportError           no per-job verdict was reached
        ├── Unavailable          transient (retried when safe)
        ├── DeadlineExceeded     transient (retried when safe)
        ├── Overloaded           transient, nothing stored; has ``retry_after`` (always retried)
        ├── MessageTooLarge      not transient: the request exceeds max_message_bytes
        ├── Unauthenticated      not transient: no token, or one the server does not know
        ├── PermissionDenied     not transient: the token lacks the role the service needs
        ├── WatchBehind          a job-event watcher fell behind and was cut off; has ``behind``
        └── ServerError          anything else, with the gRPC ``code``

    TimeoutError
    └── WaitTimeout              a wait for jobs ran out of time (``.finished``, ``.pending``)

    KeyboardInterrupt
    └── EnqueueInterrupted       Ctrl-C stopped ``enqueue_many``; what was stored (``.answered``, ``.maybe_stored``)

Each class's docstring is its default message. ``TransportError.transient`` tells
whether backing off and retrying is reasonable. ``AdminError`` is a mixin, not a family:
``except AdminError`` catches what the admin client's server refusals raise
(``AdminRefused``); its transport failures are the ordinary ``TransportError`` classes.
Which wire reason becomes which exception: ``sepp.rejections.REASONS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc

    from sepp.attempts import Attempt
    from sepp.rejections import RejectionCode
    from sepp.request import IndexedRejection, Rejection

    # The fields of a JobOutcome: sepp.request.outcomes itself imports this module (its
    # JobOutcome.value raises JobFailed / JobCancelled). Every outcome passed is a JobOutcome.
    from sepp.request.outcome_fields import OutcomeFields as JobOutcome


class SeppError(Exception):
    """A sepp operation failed."""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or type(self).__name__).strip().splitlines()[0]
        super().__init__(self.message)


# ----------------------------------------------------------------- rejections


class RefusedError(SeppError):
    """The server refused the request deterministically; sending it again fails the same way."""


class RejectedError(RefusedError):
    """The server refused the request; sending it again fails the same way."""

    def __init__(self, rejection: Rejection, message: str | None = None) -> None:
        self.rejection = rejection
        super().__init__(message or str(rejection))

    @property
    def code(self) -> RejectionCode:
        """The rejection's catalogue code."""
        return self.rejection.code

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.rejection, self.message))


class AtomicEnqueueError(RejectedError):
    """The atomic batch was refused; nothing was enqueued.

    ``errors`` are the failures by index: every one, except when a server's answer could not
    carry them all (its detail is capped at 6 KiB) — then the first ones, and
    ``total`` says how many jobs failed (``total == len(errors)`` otherwise).
    """

    def __init__(self, errors: Sequence[IndexedRejection], message: str | None = None, *,
                 total: int | None = None) -> None:
        if not errors:
            raise ValueError("AtomicEnqueueError needs at least one rejection")
        self.errors: list[IndexedRejection] = sorted(errors, key=lambda e: e.index)
        self.total = max(total or 0, len(self.errors))
        shown = "; ".join(str(e) for e in self.errors[:4])
        more = f"; and {self.total - 4} more" if self.total > 4 else ""
        default = f"atomic batch rejected, nothing enqueued: {shown}{more}"
        # ``.rejection`` is the first failure by index, so generic RejectedError handling works.
        super().__init__(self.errors[0].rejection, message or default)

    def __reduce__(self) -> tuple[object, ...]:
        return (_atomic_error, (self.errors, self.message, self.total))


class AdminError(SeppError):
    """The server refused the admin request.

    A mixin kept for ``except AdminError`` users: what is raised is ``AdminRefused``. ``code``
    is the gRPC status (NOT_FOUND, FAILED_PRECONDITION, INVALID_ARGUMENT, UNAUTHENTICATED, …),
    ``reason`` the ErrorInfo reason (``QUEUE_NOT_FOUND``, ``JOB_STATE``, …; the status name
    when the answer had none) and ``metadata`` the ErrorInfo metadata.
    """

    def __init__(self, message: str, *, code: grpc.StatusCode, reason: str = "",
                 metadata: dict[str, str] | None = None) -> None:
        self.code = code
        self.reason = reason
        self.metadata = dict(metadata or {})
        super().__init__(message)


class AdminRefused(AdminError, RefusedError):
    """The server refused the admin request."""


class JobNotFound(RefusedError):
    """No job has that id: it was never enqueued, or it was deleted (a finished job is kept
    only for its queue's retention)."""

    def __init__(self, message: str | None = None, *, job_id: str = "") -> None:
        #: The id the server named ("" when it named none).
        self.job_id = job_id
        super().__init__(message)


# ----------------------------------------------------------------- a job's outcome


class JobOutcomeError(SeppError):
    """A job waited for ended without a result: ``outcome`` (a ``JobOutcome``) says how."""

    def __init__(self, outcome: JobOutcome, message: str | None = None) -> None:
        self.outcome = outcome
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.outcome, self.message)


class JobFailed(JobOutcomeError):
    """The job was dead-lettered: it failed for good (``last_error``, ``attempts``, ``reason``)."""

    def __init__(self, outcome: JobOutcome, message: str | None = None) -> None:
        # A dead-letter reason often quotes the last error already ("NACK_DEAD_LETTER: <error>"): say it once.
        error = outcome.last_error
        detail = f": {error}" if error and error not in (outcome.reason or "") else ""
        super().__init__(outcome, message or f"job {outcome.job_id} failed after {outcome.attempt} attempt(s) "
                                             f"({outcome.reason or 'dead-lettered'}){detail}")

    @property
    def last_error(self) -> str:
        """The error message of the last attempt that reported one ("" when none did)."""
        return self.outcome.last_error

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """Every attempt, oldest first, with its outcome and error."""
        return self.outcome.attempts

    @property
    def reason(self) -> str:
        """Why it was dead-lettered: ``ATTEMPTS_EXHAUSTED``, ``NACK_DEAD_LETTER`` or
        ``LEASE_EXPIRED`` (plus the worker's reason)."""
        return self.outcome.reason


class JobCancelled(JobOutcomeError):
    """An admin cancelled the job before it completed."""

    def __init__(self, outcome: JobOutcome, message: str | None = None) -> None:
        why = f": {outcome.reason}" if outcome.reason else ""
        super().__init__(outcome, message or f"job {outcome.job_id} was cancelled{why}")


class WaitTimeout(TimeoutError):
    """A wait for jobs ended before every job finished (``Client.wait``, ``as_completed``,
    ``result``): a ``TimeoutError``, not a ``SeppError`` — nothing failed, the jobs go on.
    ``finished`` maps the ids that finished to their ``JobOutcome``; ``pending`` lists the
    others, in the order asked."""

    def __init__(self, message: str, *, finished: dict[str, JobOutcome] | None = None,
                 pending: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.finished = dict(finished or {})
        self.pending = list(pending)

    def __reduce__(self) -> tuple[Any, ...]:
        return _wait_timeout, (str(self), self.finished, self.pending)


# ----------------------------------------------------------------- transport


class TransportError(SeppError):
    """The call did not reach a per-job verdict (connection, deadline, load or protocol)."""

    #: Whether backing off and retrying is reasonable (safe with an idempotency key).
    transient: bool = False

    #: ``enqueue_many`` only: the results of the requests before the first one that got no
    #: verdict — a prefix of the requests, in order, one ``EnqueueAck`` or ``Rejection`` each
    #: (the answered parts of a batch sent in parts included). ``None`` for any other call.
    answered: list[Any] | None = None

    #: ``enqueue_many`` only: the indexes of the requests that may or may not be stored — from
    #: ``len(answered)`` up to the end of the last batch that may have reached the server
    #: (sent, no verdict; a batch answered after one that was not is in it too). The requests
    #: from ``maybe_stored.stop`` on were never sent. ``None`` for any other call.
    maybe_stored: range | None = None

    #: ``enqueue_many`` only: the failed call's own message, without the account of the
    #: requests that ``enqueue_many`` puts in the exception's message. ``None`` otherwise.
    call_message: str | None = None

    def answered_after(self, before: list[Any]) -> None:
        """Put ``before`` (the results of the requests just before the ones this error's
        ``answered`` covers) in front of ``answered``: how ``enqueue_many`` builds the prefix
        as the error passes out through each batch and each part of a split batch."""
        self.answered = before + (self.answered or [])

    def __init__(self, message: str | None = None, *, code: grpc.StatusCode | None = None,
                 reason: str = "") -> None:
        self.code = code
        self.reason = reason
        super().__init__(message)


class EnqueueInterrupted(KeyboardInterrupt):
    """``enqueue_many`` was interrupted (Ctrl-C, i.e. SIGINT, or any ``KeyboardInterrupt``) and
    says what became of the requests.

    A ``KeyboardInterrupt``, not a ``SeppError``: code that stops on Ctrl-C keeps stopping
    (``except KeyboardInterrupt`` catches it; ``except Exception`` and ``except SeppError`` do
    not swallow it), and the extra attributes are there for code that wants to resume.

    Attributes:
        answered: The results of the requests before the first one without a verdict — a
            prefix of the requests, in order, one ``EnqueueAck`` or ``Rejection`` each: the
            batches answered before the interruption and those whose verdict came while
            ``enqueue_many`` waited for the batches in flight (``ClientOptions.interrupt_grace``),
            each passed to ``on_batch`` and ``progress`` too (unless a callback raised or a
            second Ctrl-C came during that wait: ``Client.enqueue_many``).
        maybe_stored: The indexes of the requests that may or may not be stored (sent, no
            verdict), a ``range`` starting at ``len(answered)``; empty when every batch sent
            was answered.
        The requests from ``maybe_stored.stop`` on were never sent: sending them again cannot
        make a duplicate.
    """

    def __init__(self, answered: list[Any], maybe_stored: range, message: str | None = None) -> None:
        self.answered = answered
        self.maybe_stored = maybe_stored
        self.message = message or f"enqueue_many interrupted: {many_account(len(answered), maybe_stored.stop)}"
        super().__init__(self.message)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.answered, self.maybe_stored, self.message))


class Unavailable(TransportError):
    """The server is unreachable or the connection dropped.

    ``not_sent`` is true when the call provably never reached a server application — no
    connection could be made (refused, unreachable, unresolvable), a stopping server
    cancelled it before any handler took it, or its deadline passed while it waited for a
    connection — so sending it again cannot duplicate anything, idempotency key or not
    .
    """

    transient = True

    def __init__(self, message: str | None = None, *, code: grpc.StatusCode | None = None,
                 reason: str = "", not_sent: bool = False) -> None:
        super().__init__(message, code=code, reason=reason)
        self.not_sent = not_sent


class DeadlineExceeded(TransportError):
    """The call's deadline passed before the server answered; the job may or may not be stored."""

    transient = True


class Overloaded(TransportError):
    """The server is shedding load (commit backlog full); nothing was stored."""

    transient = True

    def __init__(self, message: str | None = None, *, retry_after: float | None = None,
                 code: grpc.StatusCode | None = None, reason: str = "OVERLOADED") -> None:
        #: Seconds the server asked us to wait (``google.rpc.RetryInfo``), if it said.
        self.retry_after = retry_after
        super().__init__(message, code=code, reason=reason)


class MessageTooLarge(TransportError):
    """The request is larger than the gRPC message cap (max_message_bytes); split it."""


class Unauthenticated(TransportError):
    """The server wants a token and the call carried none, or one it does not know; check --token / SEPP_TOKEN / token=.

    Raised for ``UNAUTHENTICATED`` by every client; never retried: sending the same
    call again fails the same way until the token is fixed.
    """


class PermissionDenied(TransportError):
    """The server knows the token but it lacks the role this service needs; check --token / SEPP_TOKEN / token=.

    Raised for ``PERMISSION_DENIED`` by every client; never retried.
    """


class WatchBehind(TransportError):
    """The job-event watch fell behind the server's buffer and was cut off; watch again and read the jobs' state.

    Live job events are at-most-once (docs/decisions.md "Live job events"): the events
    between the cut and a new watch are not replayed. ``behind`` is how many events the
    watcher missed when it was cut off (0 when the server did not say).
    """

    transient = True

    def __init__(self, message: str | None = None, *, behind: int = 0, code: grpc.StatusCode | None = None,
                 reason: str = "WATCH_BEHIND") -> None:
        #: Events the watcher had missed when it was cut off.
        self.behind = behind
        super().__init__(message, code=code, reason=reason)


class ServerError(TransportError):
    """The server answered with an unexpected gRPC error."""


__all__ = [
    "AdminError",
    "AdminRefused",
    "AtomicEnqueueError",
    "DeadlineExceeded",
    "EnqueueInterrupted",
    "JobCancelled",
    "JobFailed",
    "JobNotFound",
    "JobOutcomeError",
    "MessageTooLarge",
    "Overloaded",
    "PermissionDenied",
    "RefusedError",
    "RejectedError",
    "SeppError",
    "ServerError",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "WaitTimeout",
    "WatchBehind",
]


def _requests(start: int, stop: int) -> str:
    """``request 5`` or ``requests 5–9`` for the indexes ``start`` ≤ i < ``stop`` (not empty)."""
    return f"request {start}" if stop == start + 1 else f"requests {start}–{stop - 1}"


def many_account(answered: int, end: int, sent: int | None = None, *, rest: bool = True,
                 where: str = "see .answered") -> str:
    """What became of the requests of an ``enqueue_many`` that stopped early, in one line:
    requests ``0..answered-1`` answered (``where`` says where their results are), ``answered..end-1``
    may or may not be stored (sent, no verdict), the rest never sent — ``end..sent-1`` when
    ``sent`` (how many requests were taken from the iterable) is given, and from ``sent`` on
    too when ``rest`` (the iterable was not read to its end, or more requests may follow).
    E.g. ``requests 0–33535 answered (see .answered); requests 33536–34559 may or may not be
    stored (sent, no verdict); requests from 34560 on were never sent (safe to send)``."""
    sent = end if sent is None else max(sent, end)
    parts = [f"{_requests(0, answered)} answered ({where})" if answered else "no request answered"]
    if end > answered:
        parts.append(f"{_requests(answered, end)} may or may not be stored (sent, no verdict)")
    if rest:
        parts.append(f"requests from {end} on were never sent (safe to send)")
    elif sent > end:
        parts.append(f"{_requests(end, sent)} {'were' if sent > end + 1 else 'was'} never sent (safe to send)")
    return "; ".join(parts)


def _atomic_error(errors: Sequence[IndexedRejection], message: str | None, total: int) -> AtomicEnqueueError:
    """Unpickles an ``AtomicEnqueueError`` (its ``total`` is keyword-only)."""
    return AtomicEnqueueError(errors, message, total=total)


def _wait_timeout(message: str, finished: dict[str, JobOutcome], pending: list[str]) -> WaitTimeout:
    """Unpickles a ``WaitTimeout`` (its ``finished`` and ``pending`` are keyword-only)."""
    return WaitTimeout(message, finished=finished, pending=pending)
