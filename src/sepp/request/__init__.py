"""The producer's value types: what you send and what comes back.

Everything here is a frozen dataclass with no I/O. ``EnqueueRequest`` turns itself
into the wire message with :meth:`EnqueueRequest.to_proto`; the other types are built
from wire messages with ``from_proto``.

What an ``EnqueueRequest`` checks when it is built, and what it leaves to validation:

* It raises at construction (``TypeError``, ``OverflowError``, ``ValueError``) only for
  things the wire cannot carry at all: a naive ``scheduled_at``, a custom
  value that is not ``str``/``int``/``float``/``bool``, an ``int`` outside int64, a
  priority or ``max_attempts`` outside int32, a string that is not valid UTF-8.
* Everything the server judges (priority 0–9, name syntax, sizes, NaN in the custom
  map, …) is left to :class:`sepp.validation.Validator`, which the client runs
  locally before sending and which yields a :class:`Rejection`. So a bad priority is
  a ``RejectedError`` with code ``InvalidArgument``, exactly as the server would say.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from types import MappingProxyType
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.request.payload import JSON_ENCODING, Payload, _check_str, _check_utf8, _new, _PayloadDraft, _set_class
from sepp.wire import INT64_MAX, INT64_MIN, CustomPrimitive, custom_to_proto

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_setattr = object.__setattr__


def _check_int32(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be int, not {type(value).__name__}")
    if not INT32_MIN <= value <= INT32_MAX:
        raise OverflowError(f"{what} {value} does not fit in int32")
    return value


def check_custom_value(key: str, value: object) -> CustomPrimitive:
    """Check one custom-map entry's Python type; return the value unchanged.

    Raises:
        TypeError: the key is not ``str`` or the value is not str/int/float/bool.
        OverflowError: an ``int`` outside int64 (ints are int64 end to end).
        ValueError: a string that is not valid UTF-8.
    """
    _check_str("custom key", key)
    if isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise OverflowError(f"custom[{key}]: int {value} does not fit in int64")
        return value
    if isinstance(value, str):
        _check_utf8(f"custom[{key}]", value)
        return value
    raise TypeError(f"custom[{key}] must be str, int, float or bool, not {type(value).__name__}")


def datetime_to_timestamp(when: dt.datetime, out: Any) -> None:
    """Write an aware datetime into a ``google.protobuf.Timestamp`` ``out`` (UTC).

    Works for every aware datetime, even ones whose UTC form falls outside
    ``datetime``'s range (the validator then calls the timestamp invalid).
    Raises ``TypeError`` for a naive datetime.
    """
    if when.tzinfo is None or when.utcoffset() is None:
        raise TypeError("scheduled_at must be timezone-aware (a naive datetime is ambiguous); "
                        "use e.g. datetime.now(timezone.utc)")
    delta = when - _EPOCH
    out.seconds = delta.days * 86_400 + delta.seconds
    out.nanos = delta.microseconds * 1_000


# ----------------------------------------------------------------------- request


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job to enqueue: a queue and a job type, plus optional knobs. The same building
    block serves all three enqueue calls.

    Attributes:
        queue: Target queue (``[A-Za-z0-9._:-]``, first a letter or digit, ≤ 128 bytes).
        job_type: Tag the worker dispatches on (≤ 256 UTF-8 bytes, no control chars).
        payload: Optional body; ``None`` sends empty data and an empty encoding.
        custom: Small typed map (str → str | int64 | float64 | bool); always a
            read-only mapping (empty when not given).
        priority: 0 (lowest) … 9 (highest); ``None`` = the queue's default.
        max_attempts: Deliveries before dead-letter, ≥ 1; ``None`` = the queue's default.
        scheduled_at: Timezone-aware run time; ``None`` or not in the future = ready now.
        idempotency_key: Dedup key, unique per queue within its dedup window; ``""``
            is normalized to ``None`` (the wire has no difference).
        trace_context: W3C trace context (``traceparent``/``tracestate``); read-only.
        depends_on: Ids (UUID text or ``uuid.UUID``) of jobs this one waits for: it is stored
            DEFERRED until all of them completed (docs/workflows.md). A tuple of canonical
            UUID texts, a repeated id kept once; at most 256 (``DependenciesTooMany``).
        on_dependency_failure: What the job does when a dependency is dead-lettered or
            cancelled: ``"cancel"`` (the default: CANCELLED naming it), ``"run"`` (released
            anyway) or ``"wait"`` (DEFERRED until it is redriven and completes);
            docs/workflows.md "When a dependency fails". Another text is ``ValueError``.

    Raises:
        TypeError: a naive ``scheduled_at``; a field or custom value of the wrong type.
        OverflowError: a custom ``int`` outside int64; priority/max_attempts outside int32.
        ValueError: a string that cannot be encoded as UTF-8.
    """

    queue: str
    job_type: str
    _: KW_ONLY
    payload: Payload | None = None
    custom: Mapping[str, CustomPrimitive] = dataclasses.field(default_factory=lambda: _EMPTY, hash=False)
    priority: int | None = None
    max_attempts: int | None = None
    scheduled_at: dt.datetime | None = None
    idempotency_key: str | None = None
    trace_context: Mapping[str, str] = dataclasses.field(default_factory=lambda: _EMPTY, hash=False)
    depends_on: tuple[str, ...] = ()
    on_dependency_failure: str = "cancel"
    #: The wire message, built by the first ``to_proto`` and reused after (not a field).
    _proto: pb.EnqueueRequest | None = dataclasses.field(default=None, init=False, repr=False, compare=False,
                                                         hash=False)

    def __init__(self, queue: str, job_type: str, *, payload: Payload | None = None,
                 custom: Mapping[str, CustomPrimitive] = _EMPTY, priority: int | None = None,
                 max_attempts: int | None = None, scheduled_at: dt.datetime | None = None,
                 idempotency_key: str | None = None, trace_context: Mapping[str, str] = _EMPTY,
                 depends_on: Sequence[str | uuid.UUID] = (), on_dependency_failure: str = "cancel") -> None:
        # Written out rather than generated (the fields' defaults are the same; the client's
        # per-job cost): an ``EnqueueRequest`` is filled in as a ``_RequestDraft`` (``_fill``:
        # a third of the instructions), a subclass's instance with slot setters (half of a
        # frozen dataclass's ``object.__setattr__`` per field).
        if type(self) is EnqueueRequest:
            _set_class(self, _RequestDraft)
            draft: _RequestDraft = self  # type: ignore[assignment]
            draft.queue = queue
            draft.job_type = job_type
            draft.payload = payload
            draft.custom = custom
            draft.priority = priority
            draft.max_attempts = max_attempts
            draft.scheduled_at = scheduled_at
            draft.idempotency_key = idempotency_key
            draft.trace_context = trace_context
            draft.depends_on = depends_on  # type: ignore[assignment]  # made a tuple in __post_init__
            draft.on_dependency_failure = on_dependency_failure
            draft._proto = None
            draft.__class__ = EnqueueRequest  # type: ignore[assignment]
        else:
            s = _REQUEST_SET
            s[0](self, queue)
            s[1](self, job_type)
            s[2](self, payload)
            s[3](self, custom)
            s[4](self, priority)
            s[5](self, max_attempts)
            s[6](self, scheduled_at)
            s[7](self, idempotency_key)
            s[8](self, trace_context)
            s[9](self, depends_on)
            s[10](self, on_dependency_failure)
            s[11](self, None)
        if (type(queue) is str and type(job_type) is str and queue.isascii() and job_type.isascii()
                and custom is _EMPTY and trace_context is _EMPTY and priority is None
                and max_attempts is None and scheduled_at is None and idempotency_key is None
                and (payload is None or type(payload) is Payload) and depends_on is _NO_DEPS
                and on_dependency_failure == "cancel"):
            return  # the common case: nothing else to check or convert
        self.__post_init__()

    def __post_init__(self) -> None:
        queue, job_type = self.queue, self.job_type
        if (type(queue) is str and type(job_type) is str and queue.isascii() and job_type.isascii()
                and self.custom is _EMPTY and self.trace_context is _EMPTY and self.priority is None
                and self.max_attempts is None and self.scheduled_at is None and self.idempotency_key is None
                and (self.payload is None or type(self.payload) is Payload) and self.depends_on is _NO_DEPS
                and self.on_dependency_failure == "cancel"):
            return  # the common case: nothing else to check or convert
        object.__setattr__(self, "depends_on", _dependency_texts(self.depends_on))
        if self.on_dependency_failure not in _DEP_FAILURE:
            raise ValueError("on_dependency_failure must be 'cancel', 'run' or 'wait', not "
                             f"{self.on_dependency_failure!r}")
        _check_str("queue", queue)
        _check_str("job_type", job_type)
        if self.payload is not None and not isinstance(self.payload, Payload):
            raise TypeError(f"payload must be a Payload, not {type(self.payload).__name__} "
                            "(wrap bytes as Payload(data, encoding))")
        custom: Mapping[str, object] | None = self.custom  # type: ignore[assignment]
        if custom is None:
            object.__setattr__(self, "custom", _EMPTY)
        else:
            checked = {key: check_custom_value(key, value) for key, value in custom.items()}
            object.__setattr__(self, "custom", MappingProxyType(checked))
        if self.priority is not None:
            _check_int32("priority", self.priority)
        if self.max_attempts is not None:
            _check_int32("max_attempts", self.max_attempts)
        when: object = self.scheduled_at
        if when is not None:
            if not isinstance(when, dt.datetime):
                raise TypeError(f"scheduled_at must be a datetime, not {type(when).__name__}")
            if when.tzinfo is None or when.utcoffset() is None:
                raise TypeError("scheduled_at must be timezone-aware (a naive datetime is ambiguous); "
                                "use e.g. datetime.now(timezone.utc)")
        if self.idempotency_key is not None:
            _check_str("idempotency_key", self.idempotency_key)
            if not self.idempotency_key:
                object.__setattr__(self, "idempotency_key", None)
        trace: Mapping[str, object] | None = self.trace_context  # type: ignore[assignment]
        if trace is None:
            object.__setattr__(self, "trace_context", _EMPTY)
        else:
            checked_trace = {_check_str("trace_context key", k): _check_str(f"trace_context[{k}]", v)
                             for k, v in trace.items()}
            object.__setattr__(self, "trace_context", MappingProxyType(checked_trace))

    # -------------------------------------------------------------- builders

    def with_payload(self, payload: Payload | bytes, encoding: str = "") -> EnqueueRequest:
        """A copy with ``payload`` (raw ``bytes`` are wrapped with ``encoding``)."""
        if not isinstance(payload, Payload):
            payload = Payload(payload, encoding)
        return dataclasses.replace(self, payload=payload)

    def with_json_payload(self, obj: Any) -> EnqueueRequest:
        """A copy whose payload is ``obj`` as JSON (``application/json``)."""
        return dataclasses.replace(self, payload=Payload.json(obj))

    def with_priority(self, priority: int | None) -> EnqueueRequest:
        """A copy with a priority override (0–9; ``None`` = the queue's default)."""
        return dataclasses.replace(self, priority=priority)

    def with_max_attempts(self, max_attempts: int | None) -> EnqueueRequest:
        """A copy with a max-attempts override (≥ 1; ``None`` = the queue's default)."""
        return dataclasses.replace(self, max_attempts=max_attempts)

    def with_custom_entry(self, key: str, value: CustomPrimitive) -> EnqueueRequest:
        """A copy with one custom entry added (or replaced)."""
        return dataclasses.replace(self, custom={**self.custom, key: value})

    def with_custom(self, custom: Mapping[str, CustomPrimitive]) -> EnqueueRequest:
        """A copy whose custom map is ``custom`` (replacing the whole map)."""
        return dataclasses.replace(self, custom=custom)

    def with_scheduled_at(self, when: dt.datetime | None) -> EnqueueRequest:
        """A copy scheduled for ``when`` (timezone-aware; a naive one raises ``TypeError``)."""
        return dataclasses.replace(self, scheduled_at=when)

    def with_delay(self, delay: dt.timedelta | float) -> EnqueueRequest:
        """A copy scheduled ``delay`` from now (a ``timedelta`` or seconds), by this host's clock."""
        if not isinstance(delay, dt.timedelta):
            delay = dt.timedelta(seconds=delay)
        return dataclasses.replace(self, scheduled_at=dt.datetime.now(dt.UTC) + delay)

    def with_idempotency_key(self, key: str | None) -> EnqueueRequest:
        """A copy carrying a dedup key (makes a retried enqueue safe)."""
        return dataclasses.replace(self, idempotency_key=key)

    def with_depends_on(self, job_ids: Sequence[str | uuid.UUID]) -> EnqueueRequest:
        """A copy that waits for the jobs ``job_ids`` (their ids, as ``EnqueueAck.job_id`` gives
        them, or ``uuid.UUID``): stored DEFERRED until every one of them completed, then READY
        (docs/workflows.md). Replaces any earlier list; a repeated id is kept once. Raises
        ``ValueError`` for a text that is not a UUID, ``TypeError`` for a single str or an item
        of another type; more than 256 distinct ids is the rejection ``DependenciesTooMany``
        (locally, before sending, and by the server)."""
        return dataclasses.replace(self, depends_on=job_ids)  # type: ignore[arg-type]

    def with_on_dependency_failure(self, policy: str) -> EnqueueRequest:
        """A copy whose job, when a dependency is dead-lettered or cancelled, does ``policy``:
        ``"cancel"`` (the default: CANCELLED with reason ``DEPENDENCY_FAILED`` naming it, its
        own dependents following theirs), ``"run"`` (released anyway) or ``"wait"`` (DEFERRED
        until the dependency is redriven and completes); docs/workflows.md. Raises
        ``ValueError`` for another text."""
        return dataclasses.replace(self, on_dependency_failure=policy)

    def with_trace_context(self, trace_context: Mapping[str, str]) -> EnqueueRequest:
        """A copy carrying W3C trace context (``traceparent``, ``tracestate``)."""
        return dataclasses.replace(self, trace_context=trace_context)

    # -------------------------------------------------------------- wire

    def to_proto(self) -> pb.EnqueueRequest:
        """The wire ``EnqueueRequest``: exactly what the client validates and sends. Built once
        per request and kept (the request is immutable); treat the message as read-only."""
        msg = self._proto
        if msg is None:
            msg = self._build_proto()
            _setattr(self, "_proto", msg)
        return msg

    def _build_proto(self) -> pb.EnqueueRequest:
        payload = self.payload
        if payload is not None:
            msg = pb.EnqueueRequest(queue=self.queue, job_type=self.job_type,
                                    payload=pb.Payload(data=payload.data, encoding=payload.encoding))
        else:
            msg = pb.EnqueueRequest(queue=self.queue, job_type=self.job_type)
        for key, value in self.custom.items():
            msg.custom[key].CopyFrom(custom_to_proto(value))
        if self.priority is not None:
            msg.priority = self.priority
        if self.max_attempts is not None:
            msg.max_attempts = self.max_attempts
        if self.scheduled_at is not None:
            datetime_to_timestamp(self.scheduled_at, msg.scheduled_at)
        if self.idempotency_key:
            msg.idempotency_key = self.idempotency_key
        for key, value in self.trace_context.items():
            msg.trace_context[key] = value
        if self.depends_on:
            msg.depends_on.extend(self.depends_on)
        if self.on_dependency_failure != "cancel":
            msg.on_dependency_failure = _DEP_FAILURE[self.on_dependency_failure]  # type: ignore[assignment]
        return msg


#: The slot setters the hand-written ``__init__`` uses for a subclass's instance, in field order
#: (slots=True made new classes).
_REQUEST_SET = tuple(EnqueueRequest.__dict__[name].__set__ for name in (
    "queue", "job_type", "payload", "custom", "priority", "max_attempts", "scheduled_at", "idempotency_key",
    "trace_context", "depends_on", "on_dependency_failure", "_proto"))

#: ``EnqueueRequest.on_dependency_failure`` → its wire value.
_DEP_FAILURE = {"cancel": pb.DEPENDENCY_FAILURE_CANCEL, "run": pb.DEPENDENCY_FAILURE_RUN,
                "wait": pb.DEPENDENCY_FAILURE_WAIT}

#: ``EnqueueRequest.depends_on`` when none is given (tested by identity on the fast path).
_NO_DEPS: tuple[str, ...] = ()


def _dependency_texts(ids: object) -> tuple[str, ...]:
    """``ids`` (UUID texts or ``uuid.UUID``s) as canonical UUID texts, a repeated id kept once,
    in the order first given. Raises ``TypeError`` for a str/bytes given as the whole list or
    an item of another type, ``ValueError`` for a text that is not a UUID. More than 256 is
    the catalogue's ``DependenciesTooMany``, found by the client's local validation (the
    server's checks, ``sepp.validation``) and by the server."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
        raise TypeError(f"depends_on must be a sequence of job ids, not {type(ids).__name__}")
    seen: dict[str, None] = {}
    for i, item in enumerate(ids):
        if isinstance(item, uuid.UUID):
            seen[str(item)] = None
        elif isinstance(item, str):
            try:
                seen[str(uuid.UUID(item))] = None
            except ValueError:
                raise ValueError(f"depends_on[{i}] is not a job id (a UUID): {item!r}") from None
        else:
            raise TypeError(f"depends_on[{i}] must be a job id (str or uuid.UUID), not {type(item).__name__}")
    return tuple(seen) if seen else _NO_DEPS


class _RequestDraft:
    """``EnqueueRequest``'s layout with a plain ``__setattr__`` (``_fill``, in
    ``sepp.request.payload``)."""

    __slots__ = EnqueueRequest.__slots__
    queue: str
    job_type: str
    payload: Payload | None
    custom: Mapping[str, CustomPrimitive]
    priority: int | None
    max_attempts: int | None
    scheduled_at: dt.datetime | None
    idempotency_key: str | None
    trace_context: Mapping[str, str]
    depends_on: tuple[str, ...]
    on_dependency_failure: str
    _proto: pb.EnqueueRequest | None


def request_maker(queue: str, job_type: str, encoding: str) -> Callable[[bytes], EnqueueRequest]:
    """``data -> EnqueueRequest(queue, job_type, payload=Payload(data, encoding))`` for many
    requests that differ in their payload bytes only (``data``: ``bytes``, not checked): the
    names and the label are checked once, here (raises as ``EnqueueRequest`` / ``Payload``),
    and each request is filled in without a constructor call (``_fill``): a quarter of the cost."""
    EnqueueRequest(queue, job_type, payload=Payload(b"", encoding))  # the checks, once

    def make(data: bytes) -> EnqueueRequest:
        body: _PayloadDraft = _new(_PayloadDraft)
        body.data, body.encoding = data, encoding
        body.__class__ = Payload  # type: ignore[assignment]
        draft: _RequestDraft = _new(_RequestDraft)
        draft.queue, draft.job_type, draft.payload = queue, job_type, body  # type: ignore[assignment]
        draft.custom = draft.trace_context = _EMPTY
        draft.priority = draft.max_attempts = draft.scheduled_at = draft.idempotency_key = draft._proto = None
        draft.depends_on, draft.on_dependency_failure = _NO_DEPS, "cancel"
        draft.__class__ = EnqueueRequest  # type: ignore[assignment]
        return draft  # type: ignore[return-value]

    return make


# The results and the server's self-description live in their own modules; imported here,
# where callers have always found them.
from sepp.request.results import BatchResult, EnqueueAck, IndexedRejection, Rejection, fresh_acks  # noqa: E402
from sepp.request.server_info import (  # noqa: E402
    NodeInfo,
    QueueInfo,
    ServerInfo,
    queue_limits_from_proto,
    queue_settings_from_proto,
    server_limits_from_proto,
)

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "JSON_ENCODING",
    "BatchResult",
    "CustomPrimitive",
    "EnqueueAck",
    "EnqueueRequest",
    "IndexedRejection",
    "NodeInfo",
    "Payload",
    "QueueInfo",
    "Rejection",
    "ServerInfo",
    "check_custom_value",
    "datetime_to_timestamp",
    "fresh_acks",
    "queue_limits_from_proto",
    "queue_settings_from_proto",
    "request_maker",
    "server_limits_from_proto",
]
