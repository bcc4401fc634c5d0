"""The transition rules: what an ack, a nack, a lease expiry, an admin cancel and a redrive
do to a job (every move between its states).

Each rule is a small pure function of what the store read (``HeldJob``, ``ExpiredLease``
or a state number), the time and the queue's policy; it returns a frozen record saying what
to write — a ``Decision`` — or a verdict that nothing is written. A driver *applies* a
``Decision`` with one guarded UPDATE (river's ``JobSetStateIfRunning`` shape: ``WHERE id
= ? AND lease_id = ? AND state = RESERVED``); it never decides itself. Randomness (the
backoff jitter) comes in as an argument (``rand``, uniform in [−1, 1], drawn by the
driver), so every rule is deterministic under test.

Times are integer microseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

import enum
import json
from typing import NamedTuple

from sepp.domain.params import SettleError, SettleKind, SettleParams, SettleResult
from sepp.domain.policy import PolicyLookup, QueuePolicy
from sepp.domain.states import State

_SCHEDULED, _READY, _RESERVED = int(State.SCHEDULED), int(State.READY), int(State.RESERVED)
_COMPLETED, _DEAD, _CANCELLED = int(State.COMPLETED), int(State.DEAD_LETTERED), int(State.CANCELLED)

#: Dead-letter reason of a nack ``retry`` on the last attempt.
ATTEMPTS_EXHAUSTED = "ATTEMPTS_EXHAUSTED"
#: Dead-letter reason of a lease that ran out on the last attempt.
LEASE_EXPIRED = "LEASE_EXPIRED"
#: Reason recorded when a cancel requested during a reservation takes effect.
CANCELLED_WHILE_RESERVED = "cancelled by admin while reserved"
#: Reason of an admin cancel that gave none.
CANCELLED_BY_ADMIN = "cancelled by admin"
#: History outcome of a nack ``retry`` that dead-lettered the job: the history says what
#: happened, not what was asked.
OUTCOME_EXHAUSTED = "attempts_exhausted"
#: History outcome and message of a lease that ran out.
OUTCOME_LEASE_EXPIRED, MESSAGE_LEASE_EXPIRED = "lease_expired", "lease expired"

#: States an admin requeue (redrive) of one job takes a job out of.
REDRIVABLE = (_DEAD, _CANCELLED)
#: The state a bulk redrive takes jobs out of (the dead-letter view).
BULK_REDRIVABLE = _DEAD
#: States an admin cancel finishes at once (DEFERRED too: waiting for its dependencies); a
#: RESERVED job is asked cooperatively.
CANCELLABLE_NOW = (_SCHEDULED, _READY, int(State.DEFERRED))


class HeldJob(NamedTuple):
    """The columns of a job a settle or an extend judges, in this order (a store's lookup
    row without its own row key: ``HeldJob._make(row[1:])``)."""

    queue: str
    state: int
    lease_id: bytes | None
    lease_expires_at: int | None
    attempt: int
    max_attempts: int
    worker_id: str | None
    started_at: int | None
    cancel_requested: int               # 0/1 (truth value)
    run_at: int
    node: str | None = None             # the node that leased it (``ReserveParams.node``)
    job_type: str = ""                  # for the job-type figures


class ExpiredLease(NamedTuple):
    """The columns of a RESERVED job whose lease ran out that the reclaim rule judges."""

    queue: str
    attempt: int
    max_attempts: int
    worker_id: str | None
    started_at: int | None
    lease_expires_at: int
    cancel_requested: int               # 0/1 (truth value)
    node: str | None = None             # the node that leased it (``ReserveParams.node``)


class Decision(NamedTuple):
    """What a transition writes to one RESERVED job, applied under its lease guard.

    ``run_at`` None keeps the job's run_at (an ack; a reclaimed lease, which keeps its place
    in the queue); ``entry`` None leaves the attempt history untouched (an ack: the
    completing attempt is implicit, docs/decisions.md), else it is the JSON text of the
    entry appended (``history_entry``). ``finished_at``/``purge_at``/``reason`` are the
    values the columns get (None clears them)."""

    state: int
    run_at: int | None
    attempt: int
    finished_at: int | None
    purge_at: int | None
    reason: str | None
    entry: str | None

    def result(self, queue: str, started_at: int | None = 0, job_type: str = "") -> SettleResult:
        """The settle verdict of this decision on a job of ``queue`` and type ``job_type``
        leased at ``started_at`` (µs): ``run_at`` is where the job went (its finish time for a
        completed job)."""
        run_at = self.finished_at if self.run_at is None else self.run_at
        return SettleResult(None, self.state, run_at or 0, self.attempt, queue, started_at or 0, job_type)


def history_entry(attempt: int, worker: str | None, started: int | None, ended: int, outcome: str,
                  message: str, detail: str, node: str | None = None) -> str:
    """One attempt-history entry as compact JSON text (the shape ``JobRecord.attempt_entries``
    reads): ``{"attempt","worker_id","node","started_at","ended_at","outcome",
    "error_message","error_detail"}`` in that order, times µs UTC (``started_at`` may be
    null). ``node`` is the name of the node that leased the job for this attempt
    (attempt history names the node; "" when unknown — entries written before it lack the key
    and read as "")."""
    return json.dumps({"attempt": attempt, "worker_id": worker or "", "node": node or "", "started_at": started,
                       "ended_at": ended, "outcome": outcome, "error_message": message, "error_detail": detail},
                      separators=(",", ":"))


def lease_error(job: HeldJob | None, lease_id: bytes, now: int) -> SettleError | None:
    """The verdict on a lease presented at ``now``: ``NOT_FOUND`` for no job; a
    lease id that is not the job's current one is ``LEASE_MISMATCH`` (checked first); the
    right lease on a job no longer RESERVED, or past (or at) its expiry, is
    ``LEASE_EXPIRED``; None when the lease is live."""
    if job is None:
        return SettleError.NOT_FOUND
    if job.lease_id != lease_id:
        return SettleError.LEASE_MISMATCH
    expires = job.lease_expires_at
    if job.state != _RESERVED or expires is None or expires <= now:
        return SettleError.LEASE_EXPIRED
    return None


def completed_purge_at(now: int, policy: QueuePolicy) -> int:
    """When a job completed at ``now`` is deleted: ``now`` + the queue's completed retention."""
    return now + policy.completed_retention


def ack(job: HeldJob, now: int, policy: QueuePolicy) -> Decision:
    """An ack of a live lease: COMPLETED, ``finished_at`` = now, purge after the completed
    retention, reason cleared; run_at, attempt and history untouched (the completing attempt
    is implicit in attempt, worker_id, started_at and finished_at). The batched ack statement
    of a driver applies this same rule to many jobs at once."""
    return Decision(_COMPLETED, None, job.attempt, now, completed_purge_at(now, policy), None, None)


def repeated_ack(job: HeldJob | None, error: SettleError, kind: SettleKind) -> SettleResult | None:
    """An ack refused as ``LEASE_EXPIRED`` on a job that is COMPLETED was repeated by the
    lease that completed it (a mismatch is caught first): it succeeds again, writing nothing
    . The verdict, or None when the refusal stands."""
    if error is SettleError.LEASE_EXPIRED and kind is SettleKind.ACK and job is not None \
            and job.state == _COMPLETED:
        return SettleResult(None, _COMPLETED, 0, job.attempt, job.queue)
    return None


def nack(job: HeldJob, p: SettleParams, policy: QueuePolicy, rand: float) -> Decision:
    """A nack of a live lease (``p.kind`` RETRY, DEAD_LETTER or RELEASE):

    - DEAD_LETTER, or RETRY with ``job.attempt ≥ max_attempts``: DEAD_LETTERED at ``p.now``
      (run_at and finished_at now, purge after the dead retention), reason ``p.reason`` or
      ``ATTEMPTS_EXHAUSTED`` (history outcome ``attempts_exhausted``);
    - RELEASE: READY, run_at kept (it keeps its place), the attempt given back;
    - RETRY: after ``p.delay`` µs when ≥ 0, else the queue's backoff for this attempt with
      jitter ``rand`` (uniform in [−1, 1]); SCHEDULED when the delay is > 0, READY at 0.

    A job an admin asked to cancel while reserved does not go back: where it would be READY
    or SCHEDULED it is CANCELLED (``CANCELLED_WHILE_RESERVED``) with that run_at and attempt.
    Every nack appends one history entry labelled ``p.outcome`` (default: the kind's value)."""
    now, attempt, kind = p.now, job.attempt, p.kind
    outcome = p.outcome or kind.value
    if kind is SettleKind.DEAD_LETTER or (kind is SettleKind.RETRY and attempt >= job.max_attempts):
        if kind is SettleKind.RETRY:
            reason, outcome = ATTEMPTS_EXHAUSTED, OUTCOME_EXHAUSTED
        else:
            reason = p.reason
        entry = history_entry(attempt, job.worker_id, job.started_at, now, outcome, p.error_message, p.error_detail,
                              job.node)
        return Decision(_DEAD, now, attempt, now, now + policy.dead_retention, reason, entry)
    entry = history_entry(attempt, job.worker_id, job.started_at, now, outcome, p.error_message, p.error_detail,
                          job.node)
    if kind is SettleKind.RELEASE:
        state, run_at, attempt = _READY, job.run_at, attempt - 1
    else:  # RETRY with attempts left
        delay = p.delay if p.delay >= 0 else policy.backoff(attempt, rand)
        state, run_at = (_SCHEDULED if delay > 0 else _READY), now + delay
    if job.cancel_requested:
        return Decision(_CANCELLED, run_at, attempt, now, now + policy.dead_retention, CANCELLED_WHILE_RESERVED,
                        entry)
    return Decision(state, run_at, attempt, None, None, None, entry)


def settle(job: HeldJob | None, p: SettleParams, policy: PolicyLookup, rand: float) -> Decision | SettleResult:
    """The whole settle rule for one ack or nack: a ``SettleResult`` when nothing is written
    (the lease is refused — ``lease_error`` — or an ack is repeated), else the ``Decision``
    to apply (``ack`` / ``nack``; ``policy`` is looked up by the job's queue).

    An ack whose result is longer than the queue's ``max_result_bytes`` is not applied: the
    attempt fails instead (``refused_result``: a RETRY with the queue's backoff and jitter
    ``rand``, dead-lettered on the last attempt), so its verdict is not COMPLETED
    (``result_refused``). A driver writes ``p.result`` with the completion of an ack's
    ``Decision`` (entry None), in the same statement."""
    err = lease_error(job, p.lease_id, p.now)
    if err is not None:
        again = repeated_ack(job, err, p.kind)
        return SettleResult(err) if again is None else again
    assert job is not None
    pol = policy(job.queue)
    if p.kind is SettleKind.ACK:
        if p.result is not None and len(p.result) > pol.max_result_bytes:
            return nack(job, refused_result(p, pol.max_result_bytes), pol, rand)
        return ack(job, p.now, pol)
    return nack(job, p, pol, rand)


#: The catalogue name a refused result's history entry starts with (``RejectionCode.RESULT_TOO_LARGE``).
RESULT_TOO_LARGE = "ResultTooLarge"


def result_too_large_message(size: int, limit: int) -> str:
    """Why a result of ``size`` bytes is refused by a queue whose ``max_result_bytes`` is
    ``limit``: the text the attempt's history records (and a refused ack's error says)."""
    return (f"{RESULT_TOO_LARGE}: the handler's result is {size} bytes, more than the queue's max_result_bytes "
            f"({limit}); the attempt failed and is retried per the queue's policy")


def refused_result(p: SettleParams, limit: int) -> SettleParams:
    """The nack an ack ``p`` becomes when its result is longer than ``limit`` bytes: RETRY
    with the queue's backoff (outcome ``retry``), no result, the refusal as its error message."""
    size = len(p.result or b"")
    return SettleParams(p.job_id, p.lease_id, SettleKind.RETRY, p.now, outcome="retry",
                        error_message=result_too_large_message(size, limit))


def result_refused(p: SettleParams, r: SettleResult) -> bool:
    """Whether ``r``, the verdict on ``p``, is an ack whose result was refused (the attempt
    failed instead): an ack that was applied always completes its job, so an applied ack
    whose job is not COMPLETED is one."""
    return p.kind is SettleKind.ACK and r.error is None and r.state != _COMPLETED


def needs_jitter(p: SettleParams) -> bool:
    """Whether the settle rule may draw on ``rand`` for ``p``: a RETRY, or an ack with a result
    or children (refused, it retries with the backoff). A driver draws the jitter only then."""
    return p.kind is SettleKind.RETRY or p.result is not None or p.children is not None


def reclaim(job: ExpiredLease, now: int, policy: PolicyLookup) -> Decision:
    """A lease that ran out, found by the sweep at ``now``. One history entry
    (outcome ``lease_expired``, ended at the expiry) and:

    - an admin asked to cancel it: CANCELLED (``CANCELLED_WHILE_RESERVED``);
    - its last attempt (``attempt ≥ max_attempts``): DEAD_LETTERED with ``LEASE_EXPIRED``;
    - else back to READY, run_at and attempt kept (the attempt was spent).

    CANCELLED and DEAD_LETTERED get run_at = the expiry, finished_at = now and a purge after
    the queue's dead retention (``policy`` is looked up only then)."""
    expired, attempt = job.lease_expires_at, job.attempt
    entry = history_entry(attempt, job.worker_id, job.started_at, expired, OUTCOME_LEASE_EXPIRED,
                          MESSAGE_LEASE_EXPIRED, "", job.node)
    if job.cancel_requested:
        return Decision(_CANCELLED, expired, attempt, now, now + policy(job.queue).dead_retention,
                        CANCELLED_WHILE_RESERVED, entry)
    if attempt >= job.max_attempts:
        return Decision(_DEAD, expired, attempt, now, now + policy(job.queue).dead_retention, LEASE_EXPIRED, entry)
    return Decision(_READY, None, attempt, None, None, None, entry)


class CancelAction(enum.Enum):
    """What an admin cancel does to a job in a given state."""

    CANCEL = "cancel"            # SCHEDULED / READY: CANCELLED now
    REQUEST = "request"          # RESERVED: flag it; its settle or its lease expiry cancels it
    UNCHANGED = "unchanged"      # already CANCELLED
    WRONG_STATE = "wrong_state"  # COMPLETED / DEAD_LETTERED (or a state no sepp writes)


class CancelDecision(NamedTuple):
    """An admin cancel's verdict; for ``CANCEL`` the columns the job gets (state CANCELLED)."""

    action: CancelAction
    finished_at: int | None = None
    purge_at: int | None = None
    reason: str | None = None


def cancel(state: int, now: int, policy: QueuePolicy, reason: str) -> CancelDecision:
    """An admin cancel at ``now`` of a job in ``state``: SCHEDULED/READY/DEFERRED are CANCELLED at once
    (finished now, purge after the dead retention, ``reason`` or ``CANCELLED_BY_ADMIN``);
    RESERVED is asked cooperatively (``REQUEST``: the flag ``nack``/``reclaim`` honour, also
    reported by an extend); CANCELLED is ``UNCHANGED``; anything else ``WRONG_STATE``."""
    if state in CANCELLABLE_NOW:
        return CancelDecision(CancelAction.CANCEL, now, now + policy.dead_retention, reason or CANCELLED_BY_ADMIN)
    if state == _RESERVED:
        return CancelDecision(CancelAction.REQUEST)
    if state == _CANCELLED:
        return CancelDecision(CancelAction.UNCHANGED)
    return CancelDecision(CancelAction.WRONG_STATE)


class Redrive(NamedTuple):
    """A redrive's new columns: READY at ``run_at`` (now) with attempt 0; finished_at,
    purge_at, reason and the cancel request cleared; id, payload, extras, priority,
    max_attempts and history kept, and the lease id too (a stale worker's re-ack is then
    ``LEASE_EXPIRED``)."""

    state: int
    run_at: int
    attempt: int


def redrive(state: int, now: int) -> Redrive | None:
    """An admin requeue (redrive) at ``now`` of a job in ``state``: the new
    columns for a DEAD_LETTERED or CANCELLED job, None (wrong state) for any other. A bulk
    redrive applies the same columns to DEAD_LETTERED jobs only (``BULK_REDRIVABLE``)."""
    if state not in REDRIVABLE:
        return None
    return Redrive(_READY, now, 0)
