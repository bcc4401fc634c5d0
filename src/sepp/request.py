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
import json as _json
import json.encoder as _json_encoder
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from types import MappingProxyType
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.limits import QueueLimits, QueueSettings, ServerLimits
from sepp.rejections import RejectionCode
from sepp.wire import INT64_MAX, INT64_MIN, CustomPrimitive, custom_to_proto

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

#: The encoding label :meth:`Payload.json` sets.
JSON_ENCODING = "application/json"

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: One encoder for every ``Payload.json``: ``json.dumps`` with non-default options builds a
#: new ``JSONEncoder`` per call (the client's per-job cost).
_ENCODER = _json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_JSON = _ENCODER.encode
_setattr = object.__setattr__


def _json_text(obj: Any) -> str:
    """``_ENCODER.encode(obj)``: the same text and the same errors, in about a third of the time.

    ``JSONEncoder.encode`` re-derives its C encoder from its options on every call
    (``iterencode``); this calls one C encoder made once with the same options but without
    the circular-reference check (``_UNCHECKED``). That check only turns endless recursion into
    ``ValueError("Circular reference detected")``, and it costs a dict insert and delete per
    container; without it the encoder keeps no state (so it is shared by every thread), and a
    value with a cycle recurses until ``RecursionError``, which has ``_ENCODER.encode`` — the
    checking encoder — encode it again to raise what it raises (``Circular reference
    detected``, or ``RecursionError`` itself for a value nested too deep without a cycle).
    Both walk the value in the same order, so any other error is the same one. Without the C
    accelerator it is ``_ENCODER.encode`` itself.
    """
    if _UNCHECKED is None or isinstance(obj, str):
        return _JSON(obj)
    try:
        return "".join(_UNCHECKED(obj, 0))
    except RecursionError:
        return _JSON(obj)


_c_make_encoder: Any = getattr(_json_encoder, "c_make_encoder", None)
_json_default = _ENCODER.default
#: ``_ENCODER``'s C encoder without the circular-reference check (``_json_text``), or None.
_UNCHECKED: Any = (None if _c_make_encoder is None else
                   _c_make_encoder(None, _json_default, _json_encoder.encode_basestring, None, ":", ",",
                                   False, False, False))
_new = object.__new__


def _check_utf8(what: str, text: str) -> None:
    """Raise ``ValueError`` if ``text`` cannot be encoded as UTF-8 (a lone surrogate)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what} is not valid UTF-8 (it contains a lone surrogate)") from None


def _check_str(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, not {type(value).__name__}")
    _check_utf8(what, value)
    return value


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


# ----------------------------------------------------------------------- payload


@dataclass(frozen=True, slots=True)
class Payload:
    """A job body: opaque bytes plus a free-form encoding label.

    sepp never interprets either; producer and worker agree on the format. The queue
    caps ``data`` at its ``max_payload_bytes`` (1 MiB by default).

    Raises:
        TypeError: ``data`` is not bytes-like (a ``str`` must be encoded first, or use
            :meth:`json`) or ``encoding`` is not ``str``.
    """

    data: bytes = b""
    encoding: str = ""

    def __init__(self, data: bytes = b"", encoding: str = "") -> None:
        # Written out rather than generated (the client's per-job cost): a ``Payload`` is filled
        # in as a ``_PayloadDraft`` (``_fill``), else with slot setters, which cost half of a
        # frozen dataclass's ``object.__setattr__`` per field.
        if type(self) is Payload:
            _set_class(self, _PayloadDraft)
            draft: _PayloadDraft = self  # type: ignore[assignment]
            draft.data = data
            draft.encoding = encoding
            draft.__class__ = Payload  # type: ignore[assignment]
        else:
            _PAYLOAD_SET[0](self, data)
            _PAYLOAD_SET[1](self, encoding)
        if type(data) is bytes and type(encoding) is str and encoding.isascii():
            return  # the common case, checked in three C calls
        self.__post_init__()

    def __post_init__(self) -> None:
        data: object = self.data
        if type(data) is bytes and type(self.encoding) is str and self.encoding.isascii():
            return  # the common case, checked in three C calls
        if isinstance(data, bytearray | memoryview):
            object.__setattr__(self, "data", bytes(data))
        elif not isinstance(data, bytes):
            raise TypeError(f"payload data must be bytes, not {type(data).__name__} "
                            "(encode text first, or use Payload.json(obj))")
        _check_str("payload encoding", self.encoding)

    @classmethod
    def json(cls, obj: Any, *, encoding: str = JSON_ENCODING) -> Payload:
        """Serialize ``obj`` as compact UTF-8 JSON, labelled ``application/json``.

        Raises ``TypeError``/``ValueError`` when ``obj`` is not JSON-serializable
        (NaN and infinities are refused: they are not JSON).
        """
        if _UNCHECKED is not None and type(obj) is dict:  # _json_text's common case, inlined
            try:
                data = "".join(_UNCHECKED(obj, 0)).encode("utf-8")
            except RecursionError:
                data = _JSON(obj).encode("utf-8")
        else:
            data = _json_text(obj).encode("utf-8")
        if cls is Payload and type(encoding) is str and encoding.isascii():
            draft: _PayloadDraft = _new(_PayloadDraft)  # __init__'s common case, without the call
            draft.data = data
            draft.encoding = encoding
            draft.__class__ = Payload  # type: ignore[assignment]
            return draft  # type: ignore[return-value]
        return cls(data, encoding)

    def decode_json(self) -> Any:
        """Parse ``data`` as UTF-8 JSON (whatever the label says).

        Raises ``ValueError`` (``json.JSONDecodeError`` or ``UnicodeDecodeError``).
        """
        return _json.loads(self.data.decode("utf-8"))

    def __len__(self) -> int:
        """Size of ``data`` in bytes."""
        return len(self.data)

    def to_proto(self) -> pb.Payload:
        """The wire ``Payload``."""
        return pb.Payload(data=self.data, encoding=self.encoding)

    @classmethod
    def from_proto(cls, msg: pb.Payload) -> Payload:
        """Build from a wire ``Payload``."""
        return cls(bytes(msg.data), msg.encoding)


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
    #: The wire message, built by the first ``to_proto`` and reused after (not a field).
    _proto: pb.EnqueueRequest | None = dataclasses.field(default=None, init=False, repr=False, compare=False,
                                                         hash=False)

    def __init__(self, queue: str, job_type: str, *, payload: Payload | None = None,
                 custom: Mapping[str, CustomPrimitive] = _EMPTY, priority: int | None = None,
                 max_attempts: int | None = None, scheduled_at: dt.datetime | None = None,
                 idempotency_key: str | None = None, trace_context: Mapping[str, str] = _EMPTY) -> None:
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
            s[9](self, None)
        if (type(queue) is str and type(job_type) is str and queue.isascii() and job_type.isascii()
                and custom is _EMPTY and trace_context is _EMPTY and priority is None
                and max_attempts is None and scheduled_at is None and idempotency_key is None
                and (payload is None or type(payload) is Payload)):
            return  # the common case: nothing else to check or convert
        self.__post_init__()

    def __post_init__(self) -> None:
        queue, job_type = self.queue, self.job_type
        if (type(queue) is str and type(job_type) is str and queue.isascii() and job_type.isascii()
                and self.custom is _EMPTY and self.trace_context is _EMPTY and self.priority is None
                and self.max_attempts is None and self.scheduled_at is None and self.idempotency_key is None
                and (self.payload is None or type(self.payload) is Payload)):
            return  # the common case: nothing else to check or convert
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
        return msg


#: The slot setters the hand-written ``__init__``s use for a subclass's instance, in field order
#: (slots=True made new classes).
_PAYLOAD_SET = tuple(Payload.__dict__[f.name].__set__ for f in dataclasses.fields(Payload))
_REQUEST_SET = tuple(EnqueueRequest.__dict__[name].__set__ for name in (
    "queue", "job_type", "payload", "custom", "priority", "max_attempts", "scheduled_at", "idempotency_key",
    "trace_context", "_proto"))

# ``_fill``: how the frozen value types are filled in cheaply. A frozen dataclass's
# ``__setattr__`` is a Python function that raises, so every field of a new instance costs a C
# call (``object.__setattr__`` or a slot setter). A draft class has the same ``__slots__``
# (the same memory layout) and Python's plain ``__setattr__``, so ``draft.field = value`` is
# one specialized store: a new instance is made a draft (``__class__`` assignment, which
# CPython allows between classes of the same layout), its fields are stored, and it is made
# the frozen class again before anyone else sees it. The result is an ordinary instance of the
# frozen class (type, repr, eq, hash and the frozen ``__setattr__`` all unchanged).
_set_class = object.__dict__["__class__"].__set__


class _PayloadDraft:
    """``Payload``'s layout with a plain ``__setattr__`` (``_fill``)."""

    __slots__ = Payload.__slots__
    data: bytes
    encoding: str


class _RequestDraft:
    """``EnqueueRequest``'s layout with a plain ``__setattr__`` (``_fill``)."""

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
    _proto: pb.EnqueueRequest | None


# ----------------------------------------------------------------------- results


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


# ----------------------------------------------------------------------- server info

_PERSIST_MODES = {0: "unspecified", 1: "sync", 2: "group", 3: "async"}


def _duration(msg: Any) -> float:
    return float(msg.seconds + msg.nanos / 1e9)


def queue_limits_from_proto(msg: pb.QueueLimits) -> QueueLimits:
    """A wire ``QueueLimits`` as the pydantic model."""
    return QueueLimits(
        max_payload_bytes=msg.max_payload_bytes,
        allowed_encodings=tuple(msg.allowed_encodings),
        max_custom_entries=msg.max_custom_entries,
        max_custom_key_bytes=msg.max_custom_key_bytes,
        max_custom_bytes=msg.max_custom_bytes,
    )


def queue_settings_from_proto(msg: pb.QueueSettings) -> QueueSettings:
    """A wire ``QueueSettings`` as the pydantic model (durations in seconds)."""
    return QueueSettings(
        default_priority=msg.default_priority,
        default_max_attempts=msg.default_max_attempts,
        lease_duration=_duration(msg.lease_duration),
        dedup_window=_duration(msg.dedup_window),
        retry_base=_duration(msg.retry_base),
        retry_cap=_duration(msg.retry_cap),
        retry_jitter=msg.retry_jitter,
        completed_retention=_duration(msg.completed_retention),
        dead_letter_retention=_duration(msg.dead_letter_retention),
        limits=queue_limits_from_proto(msg.limits),
        max_in_flight=msg.max_in_flight,
        rate_limit=msg.rate_limit,
        rate_burst=msg.rate_burst,
        concurrency_key=msg.concurrency_key,
        max_in_flight_per_key=msg.max_in_flight_per_key,
        consumer_timeout=_duration(msg.consumer_timeout),
    )


def server_limits_from_proto(msg: pb.ServerLimits) -> ServerLimits:
    """The advertised server limits as the pydantic model.

    Limits the server does not advertise (``max_message_bytes``, the worker-side
    ones) keep the model's defaults: they are *not* the server's values.
    """
    return ServerLimits(
        max_enqueue_batch=msg.max_enqueue_batch,
        max_attempts_ceiling=msg.max_attempts_ceiling,
        max_queue_name_bytes=msg.max_queue_name_bytes,
        max_job_type_bytes=msg.max_job_type_bytes,
        max_schedule_horizon=_duration(msg.max_schedule_horizon),
        max_idempotency_key_bytes=msg.max_idempotency_key_bytes,
        max_encoding_bytes=msg.max_encoding_bytes,
        max_trace_entries=msg.max_trace_entries,
        max_trace_value_bytes=msg.max_trace_value_bytes,
    )


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as the server advertises it.

    Attributes:
        name: The queue name.
        settings: Defaults and limits of the queue.
        paused: Whether reservation is paused (enqueue still works).
        declared: True when declared (config or admin API), False when created on demand.
    """

    name: str
    settings: QueueSettings
    paused: bool = False
    declared: bool = False

    @classmethod
    def from_proto(cls, msg: pb.QueueInfo) -> QueueInfo:
        """Build from a wire ``QueueInfo``."""
        return cls(msg.name, queue_settings_from_proto(msg.settings), bool(msg.paused), bool(msg.declared))


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One server process of a cluster, as ``GetServerInfo`` lists it.

    Attributes:
        name: Its node name (``node_name``, default the host name).
        address: Its gRPC address as it bound it, ``HOST:PORT``.
        version: Its sepp version.
        started_at: When it started, seconds since the epoch (UTC).
        last_seen: Its last heartbeat (every 5 s while it runs), seconds since the epoch (UTC).
    """

    name: str
    address: str = ""
    version: str = ""
    started_at: float = 0.0
    last_seen: float = 0.0

    @classmethod
    def from_proto(cls, msg: ppb.NodeInfo) -> NodeInfo:
        """Build from a wire ``NodeInfo``."""
        return cls(msg.name, msg.address, msg.version, msg.started_at.ToMicroseconds() / 1e6,
                   msg.last_seen.ToMicroseconds() / 1e6)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``GetServerInfo`` advertises: enough to validate requests locally.

    Attributes:
        version: The server's sepp version, e.g. ``"0.1.0"``.
        features: Feature flags, e.g. ``{"enqueue_atomic", "idempotency", "scheduling"}``.
        persist_mode: ``"sync"``, ``"group"``, ``"async"`` (``"unspecified"`` if unknown).
        strict: In strict mode an undeclared queue is ``UnknownQueue``.
        limits: Server-wide limits. Only the advertised fields are the server's;
            ``max_message_bytes`` and the worker-side fields keep their defaults.
        queue_defaults: Settings a queue created on first enqueue gets.
        queues: Every queue the server knows, by name (sorted).
        uptime: Seconds since the server started.
        node: The server's node name.
        storage: The storage backend, ``"sqlite"`` or ``"postgres"`` (``""`` from an older server).
        nodes: Every node sharing the server's store, by name (with SQLite the
            server itself).
    """

    version: str
    features: frozenset[str]
    persist_mode: str
    strict: bool
    limits: ServerLimits
    queue_defaults: QueueSettings
    queues: Mapping[str, QueueInfo] = dataclasses.field(hash=False)
    uptime: float = 0.0
    node: str = ""
    storage: str = ""
    nodes: tuple[NodeInfo, ...] = ()

    def queue_limits(self, queue: str) -> QueueLimits | None:
        """The limits a job for ``queue`` is validated against.

        A listed queue's own limits; an unlisted one gets ``queue_defaults.limits``,
        or ``None`` in strict mode (meaning ``UnknownQueue``).
        """
        info = self.queues.get(queue)
        if info is not None:
            return info.settings.limits
        return None if self.strict else self.queue_defaults.limits

    def has_feature(self, name: str) -> bool:
        """Whether the server advertises feature flag ``name``."""
        return name in self.features

    @classmethod
    def from_proto(cls, msg: ppb.ServerInfo) -> ServerInfo:
        """Build from a wire ``ServerInfo``.

        Raises ``pydantic.ValidationError`` when an advertised limit is out of range.
        """
        queues = {q.name: QueueInfo.from_proto(q) for q in sorted(msg.queues, key=lambda q: q.name)}
        return cls(
            version=msg.version,
            features=frozenset(msg.features),
            persist_mode=_PERSIST_MODES.get(int(msg.persist_mode), "unspecified"),
            strict=bool(msg.strict),
            limits=server_limits_from_proto(msg.limits) if msg.HasField("limits") else ServerLimits(),
            queue_defaults=(queue_settings_from_proto(msg.queue_defaults)
                            if msg.HasField("queue_defaults") else QueueSettings()),
            queues=MappingProxyType(queues),
            uptime=_duration(msg.uptime),
            node=msg.node,
            storage=msg.storage,
            nodes=tuple(NodeInfo.from_proto(n) for n in msg.nodes),
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
    "server_limits_from_proto",
]
