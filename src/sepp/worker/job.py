"""``Job``: what a handler receives — every field of a reserved job, typed.

A ``Job`` wraps the wire ``Reservation`` and converts fields on first access, so the
runtime's hot path pays nothing for fields a handler never reads. Times are aware
UTC ``datetime``s; custom-map values keep their type (int stays int, bool stays
bool).
"""

from __future__ import annotations

import datetime as dt
import json as _json
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from google.protobuf import timestamp_pb2

from sepp.api.v1 import worker_pb2 as wpb
from sepp.attempts import Attempt
from sepp.hard_limits import MAX_CHILDREN, MAX_PROGRESS_BYTES
from sepp.wire import CustomPrimitive, custom_map_from_proto
from sepp.worker._dependencies import present, results
from sepp.worker.outcome import Children

if TYPE_CHECKING:
    from sepp.request.outcomes import JobOutcome
    from sepp.request.workflow import NodeSpec
    from sepp.worker._dependencies import DependencyReader

UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def timestamp_to_datetime(ts: timestamp_pb2.Timestamp) -> dt.datetime:
    """A protobuf ``Timestamp`` as an aware UTC ``datetime`` (microsecond precision)."""
    return _EPOCH + dt.timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


class JobAttempt(Attempt):
    """One finished earlier attempt from the job's history: the producer's
    ``sepp.attempts.Attempt`` (attempt, worker_id, node, started_at, ended_at,
    outcome, error_message, error_detail; times aware UTC), under the worker's name.

    ``outcome`` is one of ``completed``, ``retry``, ``retry_after``, ``dead_letter``,
    ``released``, ``lease_expired``, ``cancelled``.
    """

    __slots__ = ()


class Job:
    """A reserved job as a handler sees it.

    Attributes (read-only unless noted):
        id: The job's UUID, canonical text.
        queue, job_type: Where it came from and what it is.
        payload: The body, ``bytes``; ``encoding`` its label (e.g. ``application/json``).
        custom: The typed custom map (``str``/``int``/``float``/``bool`` values), read-only.
        priority: 0 (lowest) … 9 (highest).
        attempt: This delivery's number, 1 on the first (a released delivery is given
            back); ``max_attempts`` the cap; ``is_last_attempt`` says whether a retry
            would dead-letter it.
        trace_context: W3C ``traceparent``/``tracestate`` map from the producer.
        enqueued_at, run_at: Aware UTC datetimes.
        idempotency_key: The producer's key, or ``None``.
        lease_id: The fencing token of this delivery; ``lease_expires_at`` its current expiry
            (aware UTC, moved by each automatic extension).
        history: Earlier finished attempts, oldest first (``JobAttempt``).
        cancel_requested: Set (by the lease keeper) once an admin asked to cancel the job;
            a long handler should check it and stop early (each ``ExtendLease`` reports it).
        lease_lost: Set when an extension was refused: the job may already run elsewhere
            and this delivery's settle will be refused.
        progress: The latest value ``set_progress`` accepted, as JSON text (None before the
            first); the Worker sends it with a lease extension, at most once a second.

    ``dependency_results()`` / ``dependency_outcomes()`` (and their ``*_async`` twins) read
    the results and outcomes of the jobs it depends on, from the server, when first called.
    ``enqueue_children`` extends the job's workflow from its handler: the children are sent
    with the ack and stored in its commit, and the jobs that depend on this one wait for them
    (docs/workflows.md "A running job extends its workflow").
    """

    __slots__ = ("__weakref__", "_children", "_custom", "_dep_outcomes", "_dependencies", "_history", "_job",
                 "_lease_expires", "_on_progress", "_reserved_at", "_trace", "cancel_requested", "lease_id",
                 "lease_lost", "progress", "reservation")

    def __init__(self, reservation: wpb.Reservation, reserved_at: float = 0.0,
                 on_progress: Callable[[Job], None] | None = None,
                 dependencies: DependencyReader | None = None) -> None:
        #: The wire reservation this job was built from.
        self.reservation = reservation
        #: When the worker took the reservation in (its clock's monotonic seconds; its
        #: adaptive prefetch measures how long a prefetched job waited for a slot).
        self._reserved_at = reserved_at
        self._job = job = reservation.job
        self.lease_id: str = reservation.lease_id
        self._lease_expires: dt.datetime | None = None  # read from the reservation when first asked
        self.cancel_requested: bool = job.cancel_requested
        self.lease_lost = False
        self._custom: Mapping[str, CustomPrimitive] | None = None
        self._trace: Mapping[str, str] | None = None
        self._history: tuple[JobAttempt, ...] | None = None
        #: Told of each new progress value (the Worker's lease keeper sends it).
        self._on_progress = on_progress
        self.progress: str | None = None
        #: Reads the dependencies' outcomes when the handler first asks (None: a job no
        #: server reserved, which has none); what it read, kept for the next ask.
        self._dependencies = dependencies
        self._dep_outcomes: dict[str, JobOutcome | None] | None = None
        #: What ``enqueue_children`` collected (None: nothing), sent with the ack.
        self._children: Children | None = None

    def enqueue_children(self, requests: Iterable[NodeSpec], then: NodeSpec | None = None) -> None:
        """Add jobs to this job's workflow: ``requests`` (each an ``EnqueueRequest`` or a task
        signature, ``task.s(...)``) and, optionally, ``then``, a callback that runs once every
        child completed. Nothing is sent now: they travel with this attempt's ack and are
        stored in its commit, so they exist only if the handler then returns (completing the
        job) — a handler that raises, a failed or refused ack, a lost lease or a crash stores
        none, and the next attempt starts from nothing (docs/workflows.md "A running job
        extends its workflow").

        Once stored, the children belong to the job's workflow (one is made for a job
        enqueued alone), and every job that depends on this one waits for the children — for
        ``then`` when given — instead of this job: it runs after them, exactly once, by its
        own ``on_dependency_failure`` when one of them fails. A child may carry its own
        ``depends_on`` (stored jobs). Calls add up: the children of every call, at most one
        ``then`` (it waits for all of them).

        The server checks each child as an enqueue when the ack arrives; a child it refuses
        (too large a payload, an unknown queue in strict mode, a ``depends_on`` id of no job)
        fails this attempt instead of completing it — retried per the queue's policy, the
        refusal in the job's history and the worker's log — and stores no child.

        Raises ``TypeError`` for a child that is not a request or signature, ``ValueError``
        for one with an idempotency key (the ack is stored once: a child needs none), for a
        second ``then``, or past 1,000 children in all (``then`` counts), and
        ``RuntimeError`` for a job run in-process (eager mode: no ack to carry them). Nothing
        is added when it raises.
        """
        if not self.lease_id:
            raise RuntimeError("enqueue_children needs a job reserved from a server (in eager mode there is no ack "
                               "to carry the children)")
        mine = self._children
        if then is not None and mine is not None and mine.then is not None:
            raise ValueError("this job already has a `then` callback (one per attempt: it waits for every child)")
        protos = [_child_proto(spec) for spec in requests]
        last = _child_proto(then) if then is not None else None
        had = 0 if mine is None else len(mine.requests) + (mine.then is not None)
        total = had + len(protos) + (last is not None)
        if total > MAX_CHILDREN:
            raise ValueError(f"a job enqueues at most {MAX_CHILDREN} children per attempt (its `then` included); "
                             f"this call would make {total}")
        if mine is None:
            self._children = Children(tuple(protos), last)
        else:
            self._children = Children((*mine.requests, *protos), mine.then if last is None else last)

    def set_progress(self, value: Any) -> None:
        """Report how far the handler got: ``value`` is any JSON-encodable value — a fraction
        (``0.42``), a dict of counters (``{"done": 420, "total": 1000}``), a short text — of
        at most 4,096 bytes as compact JSON (UTF-8).

        The latest value is stored as the job's progress (``sepp jobs show``, the admin API's
        ``Job.progress``, a ``progress`` live job event): the Worker sends it with a lease
        extension at most once a second per job, the latest value winning, so calling this
        often (every item of a loop) costs next to nothing. Safe from any thread (a
        synchronous handler runs in one). A value sent after the lease was lost is refused
        with the lease (``lease_lost``).

        Raises ``TypeError`` for a value JSON cannot encode and ``ValueError`` for one longer
        than 4,096 bytes encoded (or holding NaN / infinity); nothing is sent then.
        """
        try:
            text = _json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except TypeError as exc:
            raise TypeError(f"set_progress needs a JSON-encodable value: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"set_progress needs a JSON-encodable value: {exc}") from None
        try:
            size = len(text) if text.isascii() else len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError("set_progress needs valid text: the value holds a lone surrogate") from None
        if size > MAX_PROGRESS_BYTES:
            raise ValueError(f"progress is {size} bytes as JSON; at most {MAX_PROGRESS_BYTES} are kept (report a "
                             "fraction, a few counters or a short text)")
        self.progress = text
        if self._on_progress is not None:
            self._on_progress(self)

    # -------------------------------------------------------------- dependencies

    async def _read_dependencies(self) -> dict[str, JobOutcome | None]:
        if self._dep_outcomes is None:
            reader = self._dependencies
            self._dep_outcomes = {} if reader is None else await reader.outcomes(self.id, self.lease_id)
        return self._dep_outcomes

    async def dependency_outcomes_async(self) -> dict[str, JobOutcome]:
        """``dependency_outcomes`` for an ``async def`` handler: ``await
        job.dependency_outcomes_async()``. Raises as ``dependency_outcomes``."""
        return present(self.id, await self._read_dependencies())

    async def dependency_results_async(self) -> dict[str, Any]:
        """``dependency_results`` for an ``async def`` handler: ``await
        job.dependency_results_async()``. Raises as ``dependency_results``."""
        return results(self.id, await self._read_dependencies())

    def dependency_outcomes(self) -> dict[str, JobOutcome]:
        """``{job_id: sepp.JobOutcome}`` of every job this one depends on (its ``depends_on``;
        in a workflow its edges first), in ``depends_on`` order: state (``COMPLETED``,
        ``DEAD_LETTERED``, ``CANCELLED``; another state for a dependency redriven after this
        job was released), result, ``last_error``, attempts, reason. ``{}`` for a job without
        dependencies. What a dependent with ``on_dependency_failure="run"`` reads to see
        which dependencies failed and why (docs/workflows.md "Reading the dependencies' results").

        Read from the server on the first call (one ``DependencyOutcomes`` call, more for
        thousands of dependencies), then kept. For a plain ``def`` handler (it blocks its
        thread); an ``async def`` handler awaits ``dependency_outcomes_async()``.

        Raises ``sepp.JobNotFound`` (``job_id`` the dependency) when a dependency is no longer
        stored (purged after its queue's retention, or deleted); ``LeaseError`` when this
        delivery's lease no longer holds; a ``TransportError`` when the server cannot be
        reached; ``RuntimeError`` when called on the worker's event loop (an ``async def``
        handler); ``TimeoutError`` after 300 s.
        """
        found = self._dep_outcomes
        if found is None:
            found = self._dependencies.blocking(self._read_dependencies()) if self._dependencies else {}
            self._dep_outcomes = found
        return present(self.id, found)

    def dependency_results(self) -> dict[str, Any]:
        """``{job_id: result}`` of every job this one depends on, in ``depends_on`` order (in a
        workflow its edges first: a ``chain`` step's only entry is the step before it): each
        result decoded as ``Client.result`` decodes it — the JSON value, ``bytes``, a
        ``sepp.Result`` for another label, ``None`` when the handler returned none. ``{}`` for
        a job without dependencies.

        Read as ``dependency_outcomes`` reads (on first use, then kept; an ``async def``
        handler awaits ``dependency_results_async()``), and raises what it raises, and also
        ``sepp.JobFailed`` / ``sepp.JobCancelled`` for a dependency dead-lettered or cancelled
        (possible for ``on_dependency_failure="run"``: read ``dependency_outcomes`` there),
        ``RuntimeError`` for one redriven after this job was released, ``ValueError`` for a
        JSON result that does not decode.
        """
        self.dependency_outcomes()
        return results(self.id, self._dep_outcomes or {})

    @property
    def lease_expires_at(self) -> dt.datetime:
        """When the current lease ends (UTC); moved by each extension."""
        if self._lease_expires is None:
            self._lease_expires = timestamp_to_datetime(self.reservation.lease_expires_at)
        return self._lease_expires

    @lease_expires_at.setter
    def lease_expires_at(self, value: dt.datetime) -> None:
        self._lease_expires = value

    # -------------------------------------------------------------- identity

    @property
    def id(self) -> str:
        """The job's UUID (canonical text)."""
        return self._job.id

    @property
    def queue(self) -> str:
        """The queue the job was reserved from."""
        return self._job.queue

    @property
    def job_type(self) -> str:
        """The type tag handlers are registered by."""
        return self._job.job_type

    # -------------------------------------------------------------- body

    @property
    def payload(self) -> bytes:
        """The payload bytes (empty when the producer sent none)."""
        return self._job.payload.data

    @property
    def encoding(self) -> str:
        """The payload's encoding label (free-form, usually a MIME type)."""
        return self._job.payload.encoding

    def json(self) -> Any:
        """The payload parsed as UTF-8 JSON, whatever its label.

        Raises ``ValueError`` (``json.JSONDecodeError`` / ``UnicodeDecodeError``) when it is not.
        An empty payload raises too: there is nothing to parse.
        """
        return _json.loads(self.payload.decode("utf-8"))

    def text(self, encoding: str = "utf-8") -> str:
        """The payload decoded as text. Raises ``UnicodeDecodeError``."""
        return self.payload.decode(encoding)

    @property
    def custom(self) -> Mapping[str, CustomPrimitive]:
        """The custom map with typed values (int64 ints, float64 floats, bools, strings)."""
        if self._custom is None:
            self._custom = MappingProxyType(custom_map_from_proto(self._job.custom))
        return self._custom

    # -------------------------------------------------------------- scheduling and attempts

    @property
    def priority(self) -> int:
        """0 (lowest) to 9 (highest)."""
        return self._job.priority

    @property
    def attempt(self) -> int:
        """This delivery's number (1 on the first)."""
        return self.reservation.attempt

    @property
    def max_attempts(self) -> int:
        """Deliveries allowed in total (1 = never retried)."""
        return self._job.max_attempts

    @property
    def is_last_attempt(self) -> bool:
        """True when a failure now dead-letters the job (ATTEMPTS_EXHAUSTED)."""
        return self.attempt >= self.max_attempts

    @property
    def enqueued_at(self) -> dt.datetime:
        """When the producer's enqueue was stored (aware UTC)."""
        return timestamp_to_datetime(self._job.enqueued_at)

    @property
    def run_at(self) -> dt.datetime:
        """When the job became (or was due to become) reservable (aware UTC)."""
        return timestamp_to_datetime(self._job.run_at)

    @property
    def idempotency_key(self) -> str | None:
        """The producer's idempotency key, or ``None``."""
        return self._job.idempotency_key or None

    @property
    def trace_context(self) -> Mapping[str, str]:
        """W3C trace context (``traceparent``, ``tracestate``), read-only; empty when none."""
        if self._trace is None:
            self._trace = MappingProxyType(dict(self._job.trace_context))
        return self._trace

    @property
    def history(self) -> tuple[JobAttempt, ...]:
        """Earlier finished attempts, oldest first."""
        if self._history is None:
            self._history = tuple(JobAttempt.from_proto(a) for a in self._job.attempts)
        return self._history

    @property
    def worker_id(self) -> str:
        """The worker id this delivery was reserved under."""
        return self._job.worker_id

    def __repr__(self) -> str:
        return (f"Job(id={self.id!r}, queue={self.queue!r}, job_type={self.job_type!r}, "
                f"attempt={self.attempt}/{self.max_attempts})")


def _child_proto(spec: NodeSpec) -> Any:
    """The wire request of a child ``spec``; ``TypeError`` / ``ValueError`` (an idempotency
    key) as ``Job.enqueue_children`` says. (The request builders are loaded on first use: a
    worker that never enqueues children does not load them.)"""
    from sepp.request.workflow import as_request

    req = as_request(spec)
    if req.idempotency_key:
        raise ValueError(f"a child job has no idempotency key (got {req.idempotency_key!r}): the ack that stores "
                         "it is stored once")
    return req.to_proto()


def detached_job(job_id: str, queue: str, job_type: str, payload: bytes, encoding: str, *,
                 custom: Mapping[str, CustomPrimitive] | None = None, priority: int = 0, max_attempts: int = 1,
                 attempt: int = 1, idempotency_key: str = "") -> Job:
    """A ``Job`` no server reserved (no lease: ``lease_id`` empty), for a handler run in this
    process — a task's eager mode (``sepp.App.run_inline``, docs/tasks.md). Its times
    (``enqueued_at``, ``run_at``, ``lease_expires_at``) are now, UTC. Raises ``TypeError`` /
    ``OverflowError`` for a custom value the custom map cannot hold."""
    from sepp.wire import custom_to_proto

    now = timestamp_pb2.Timestamp()
    now.FromDatetime(dt.datetime.now(UTC))
    reservation = wpb.Reservation(attempt=attempt)
    reservation.lease_expires_at.CopyFrom(now)
    job = reservation.job
    job.id, job.queue, job.job_type = job_id, queue, job_type
    job.payload.data, job.payload.encoding = payload, encoding
    job.priority, job.max_attempts, job.attempt, job.idempotency_key = priority, max_attempts, attempt, idempotency_key
    job.run_at.CopyFrom(now)
    job.enqueued_at.CopyFrom(now)
    for key, value in (custom or {}).items():
        job.custom[key].CopyFrom(custom_to_proto(value))
    return Job(reservation)


__all__ = ["Job", "JobAttempt", "detached_job", "timestamp_to_datetime"]
