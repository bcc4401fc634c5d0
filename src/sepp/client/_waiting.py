"""Waiting for jobs from the producer side, transport-free: what ``Client`` and
``AsyncClient`` share of ``wait``, ``as_completed`` and ``result``.

A wait is a series of ``WaitJobs`` long-polls, each at most the server's ``max_wait``
(``ServerInfo.limits.max_wait_seconds`` when the client has it cached, else
``DEFAULT_POLL``) and no longer than the time left; each call is an ordinary idempotent call
of the client (``_call``: it waits for a connection and retries transient errors per the
``RetryPolicy``), so a server restart within the wait is ridden out like an enqueue's. More
than ``MAX_WAIT_JOBS`` ids are waited for in chunks, each chunk's polls running side by side.
Outcomes come in the order the polls answer them (jobs one answer holds: in request order).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sepp.api.v1 import producer_pb2 as ppb
from sepp.domain.clock import Clock
from sepp.errors import JobNotFound, SeppError, ServerError, WaitTimeout
from sepp.hard_limits import MAX_WAIT_JOBS
from sepp.request import EnqueueAck
from sepp.request.outcomes import JobOutcome
from sepp.wire import seconds_to_duration

#: Longest poll when the server's ``max_wait`` is not known yet (its default), seconds.
DEFAULT_POLL = 60.0

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def job_ids(items: Iterable[str | EnqueueAck] | str | EnqueueAck) -> list[str]:
    """The canonical ids of ``items`` (job ids as UUID text, or ``EnqueueAck``\\ s), each once,
    in order. Raises ``ValueError`` for an id that is not a UUID, ``TypeError`` for an item
    of another type; ``ValueError`` for no ids at all."""
    listed: Iterable[str | EnqueueAck] = [items] if isinstance(items, str | EnqueueAck) else items
    out: dict[str, None] = {}
    for item in listed:
        text = item.job_id if isinstance(item, EnqueueAck) else item
        if not isinstance(text, str):
            raise TypeError(f"a job id is a str or an EnqueueAck, not {type(item).__name__}")
        try:
            out[str(uuid.UUID(text))] = None
        except ValueError:
            raise ValueError(f"{text!r} is not a job id (a UUID)") from None
    if not out:
        raise ValueError("no job ids to wait for")
    return list(out)


def chunks(ids: Sequence[str]) -> list[list[str]]:
    """``ids`` in chunks of at most ``MAX_WAIT_JOBS`` (one ``WaitJobs`` call each)."""
    return [list(ids[i:i + MAX_WAIT_JOBS]) for i in range(0, len(ids), MAX_WAIT_JOBS)]


class Deadline:
    """The end of a wait of ``timeout`` seconds (None: no end) on ``clock``'s monotonic time."""

    def __init__(self, timeout: float | None, clock: Clock) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must not be negative (got {timeout})")
        self.clock = clock
        self.timeout = timeout
        self.at = None if timeout is None else clock.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (≤ 0 once passed), None without an end."""
        return None if self.at is None else self.at - self.clock.monotonic()

    def poll(self, longest: float, first: bool) -> float | None:
        """How long the next ``WaitJobs`` may wait: at most ``longest`` and the time left;
        None when the wait is over (the first poll is always made: a timeout of 0 looks once)."""
        left = self.remaining()
        if left is None:
            return longest
        if left <= 0:
            return 0.0 if first else None
        return min(left, longest)


def request(ids: Sequence[str], poll: float) -> ppb.WaitJobsRequest:
    """The ``WaitJobs`` request of one poll."""
    return ppb.WaitJobsRequest(job_ids=ids, timeout=seconds_to_duration(poll))


def outcomes(response: ppb.WaitJobsResponse, pending: dict[str, Any]) -> list[JobOutcome]:
    """The outcomes of ``response`` for ids still in ``pending`` (removed from it), in order."""
    out = []
    for msg in response.outcomes:
        if msg.job_id in pending:
            del pending[msg.job_id]
            out.append(JobOutcome.from_proto(msg))
    return out


def arrived(item: list[JobOutcome] | BaseException, pending: dict[str, Any],
            done: dict[str, JobOutcome]) -> list[JobOutcome]:
    """What one poller handed over, for the caller: the outcomes of ids still ``pending``
    (moved from ``pending`` into ``done``, in order; an id already done is skipped). Raises
    the poller's exception when it handed one over instead."""
    if isinstance(item, BaseException):
        raise item
    new: list[JobOutcome] = []
    for outcome in item:
        if outcome.job_id in pending:
            del pending[outcome.job_id]
            done[outcome.job_id] = outcome
            new.append(outcome)
    return new


def not_found(error: SeppError, asked: Sequence[str]) -> SeppError:
    """``error`` as ``JobNotFound`` when the server said an id is of no job (``JOB_NOT_FOUND``:
    the id it names, else the only one asked for), else ``error`` itself."""
    if isinstance(error, ServerError) and error.reason == "JOB_NOT_FOUND":
        found = _UUID.search(error.message)
        named = found[0].lower() if found else (asked[0] if len(asked) == 1 else "")
        return JobNotFound(error.message, job_id=named)
    return error


def timed_out(deadline: Deadline, done: dict[str, JobOutcome], pending: Iterable[str]) -> WaitTimeout:
    """The ``WaitTimeout`` of a wait whose ``timeout`` passed with ``pending`` unfinished."""
    left = list(pending)
    return WaitTimeout(f"{len(left)} job(s) not finished within {deadline.timeout:g} s "
                       f"({len(done)} finished)", finished=dict(done), pending=left)


def value_of(outcome: JobOutcome) -> Any:
    """What ``result`` returns for ``outcome``: ``JobOutcome.value`` — the decoded result of a
    COMPLETED job (``decode_result``); raises ``JobFailed`` (dead-lettered) or
    ``JobCancelled``."""
    return outcome.value()


__all__ = ["DEFAULT_POLL", "Deadline", "chunks", "job_ids", "not_found", "outcomes", "request", "timed_out",
           "value_of"]
