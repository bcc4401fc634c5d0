"""Request validation shared by the server and the client (docs/errors.md).

Both sides validate the same protobuf ``EnqueueRequest`` with the same code, so a
client's local verdict always equals the server's (given the same limits and clock).
Checks run in the catalogue's fixed order; the first failing one wins. Where several
custom keys fail the same check, the smallest key (by code point) is reported, so the
verdict does not depend on map iteration order. A message or field that names a value the
caller sent quotes at most 200 bytes of it (``sepp.quoting``).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from sepp.api.v1 import common_pb2 as pb
from sepp.limits import MAX_TRACE_KEY_BYTES, QueueLimits, ServerLimits
from sepp.quoting import clip, quote
from sepp.rejections import RejectionCode

_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z.
_TS_MIN, _TS_MAX = -62135596800, 253402300799

_IA = RejectionCode.INVALID_ARGUMENT.to_wire()
_QNI = RejectionCode.QUEUE_NAME_INVALID.to_wire()
_JTI = RejectionCode.JOB_TYPE_INVALID.to_wire()
_UQ = RejectionCode.UNKNOWN_QUEUE.to_wire()
_PTL = RejectionCode.PAYLOAD_TOO_LARGE.to_wire()
_ENA = RejectionCode.ENCODING_NOT_ALLOWED.to_wire()
_CETM = RejectionCode.CUSTOM_ENTRIES_TOO_MANY.to_wire()
_CKTL = RejectionCode.CUSTOM_KEY_TOO_LONG.to_wire()
_CMTL = RejectionCode.CUSTOM_MAP_TOO_LARGE.to_wire()
_STF = RejectionCode.SCHEDULED_TOO_FAR.to_wire()
_IKTL = RejectionCode.IDEMPOTENCY_KEY_TOO_LONG.to_wire()
_TCI = RejectionCode.TRACE_CONTEXT_INVALID.to_wire()
_DTM = RejectionCode.DEPENDENCIES_TOO_MANY.to_wire()

#: The values of ``EnqueueRequest.on_dependency_failure`` (an unknown number is InvalidArgument).
_DEP_POLICIES = frozenset(pb.DependencyFailure.values())

#: Most distinct job ids one job may depend on (``EnqueueRequest.depends_on``; docs/workflows.md).
MAX_DEPENDENCIES = 256


def dependency_ids(depends_on: Sequence[str]) -> list[bytes] | pb.Rejection:
    """The 16-byte ids of ``depends_on`` (UUID texts), a repeated id counted once, in the order
    first given; or the rejection: ``InvalidArgument`` (field ``depends_on[i]``) for a text that
    is not a UUID, ``DependenciesTooMany`` (limit 256, actual the distinct count) past 256."""
    seen: dict[bytes, None] = {}
    for i, text in enumerate(depends_on):
        try:
            seen[uuid.UUID(text).bytes] = None
        except ValueError:
            return _reject(_IA, f"depends_on[{i}] is not a job id (a UUID): {clip(repr(text), 80)}", f"depends_on[{i}]")
    if len(seen) > MAX_DEPENDENCIES:
        return _reject(_DTM, f"a job depends on at most {MAX_DEPENDENCIES} jobs", "depends_on", MAX_DEPENDENCIES,
                       len(seen))
    return list(seen)


def utf8_len(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def custom_value_size(value: pb.CustomValue) -> int:
    """Size of one custom value: UTF-8 bytes for a string, 8 for int/float, 1 for bool."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return utf8_len(value.string_value)
    if kind == "bool_value":
        return 1
    return 8


def queue_fix(queue: str, flag: str) -> str:
    """The end of a message refusing a job for one of its queue's settings: how to raise it.
    ``sepp queues declare`` rather than ``update``: it creates the queue or changes the
    settings given over the stored ones, so the command works whether or not the queue
    exists — a job refused on a new queue (over the defaults' limits) never created it."""
    return f"; to raise it: sepp queues declare {clip(queue)} --{flag} N"


def server_fix(key: str) -> str:
    """The end of a message refusing a job for a server-wide limit: where to raise it (the
    ``[limits]`` table of the server's TOML file, or its ``SEPP_LIMITS__…`` variable)."""
    return f"; to raise it: set [limits] {key} in the server's config (SEPP_LIMITS__{key.upper()})"


def _reject(code: int, message: str, field: str, limit: int | None = None,
            actual: int | None = None) -> pb.Rejection:
    rejection = pb.Rejection(code=code, message=message, field=field)  # type: ignore[arg-type]
    if limit is not None:
        rejection.limit = limit
    if actual is not None:
        rejection.actual = actual
    return rejection


def traceparent_valid(value: str) -> bool:
    """W3C Trace Context ``traceparent`` check (version-format 00; future versions tolerated)."""
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return False
    version, trace_id, span_id, _flags, rest = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return False
    return not (version == "00" and rest is not None)


class QueueRefused(NamedTuple):
    """What a ``QueueLookup`` answers for an unknown queue that may not be created: the end
    of the UnknownQueue message, and the limit and count it carries (the
    server's ``max_queues`` in non-strict mode)."""

    why: str
    limit: int
    actual: int


#: Looks a queue up by name: its limits, ``None`` when it is unknown in strict mode, or a
#: ``QueueRefused`` when it is unknown and may not be created.
QueueLookup = Callable[[str], QueueLimits | QueueRefused | None]

#: What ``Validator.check`` read from a valid request: (queue, job_type, payload data,
#: payload encoding, priority or None when unset, max_attempts or None when unset,
#: scheduled_at in ns since the epoch (UTC) or None, has custom or trace entries,
#: idempotency key or None).
Checked = tuple[str, str, bytes, str, int | None, int | None, int | None, bool, str | None]


class Validator:
    """Validates ``EnqueueRequest`` protos against server-wide and per-queue limits.

    ``queue_limits`` maps a queue name to its limits, or to ``None`` when the queue is
    unknown and the server is strict (→ ``UnknownQueue``). Names, job types and
    encodings that passed their (server-wide, static) checks once are remembered, so
    the common case costs a few dictionary lookups.
    """

    __slots__ = ("_encodings", "_names", "_types", "limits", "queue_limits")

    _CACHE_MAX = 4096

    def __init__(self, limits: ServerLimits, queue_limits: QueueLookup) -> None:
        self.limits = limits
        self.queue_limits = queue_limits
        self._names: set[str] = set()
        self._types: set[str] = set()
        self._encodings: set[str] = {""}

    def _remember(self, cache: set[str], value: str) -> None:
        if len(cache) >= self._CACHE_MAX:
            cache.clear()
        cache.add(value)

    def validate(self, req: pb.EnqueueRequest, now_ns: int) -> pb.Rejection | None:
        """Return the first failing check's ``Rejection`` (catalogue order), or ``None``.

        ``now_ns`` is the current UTC time in nanoseconds since the epoch, used only
        for ``ScheduledTooFar``.
        """
        verdict = self.check(req, now_ns)
        return verdict if type(verdict) is pb.Rejection else None

    def probe_queue_name(self, name: str) -> pb.Rejection | None:
        """The first rejection an enqueue to queue ``name`` (of job type ``x``, nothing else
        set) would get, or ``None``: how the admin checks a name it is asked to declare
        without building a wire request itself. A ``QUEUE_NAME_INVALID`` code means the name
        itself is refused."""
        return self.validate(pb.EnqueueRequest(queue=name, job_type="x"), 0)

    def check(self, req: pb.EnqueueRequest, now_ns: int) -> pb.Rejection | Checked:
        """``validate``, but a valid request gives back the fields the checks read (a
        ``Checked`` tuple), so the server builds the row without reading them again."""
        lim = self.limits
        custom = req.custom
        has = req.HasField
        # 1. InvalidArgument: malformed fields.
        priority = req.priority if has("priority") else None
        if priority is not None and not 0 <= priority <= 9:
            # ``limit`` is the bound that was crossed: 0 below the range, 9 above it.
            return _reject(_IA, "priority must be between 0 and 9", "priority", 0 if priority < 0 else 9, priority)
        max_attempts = req.max_attempts if has("max_attempts") else None
        if max_attempts is not None and not 1 <= max_attempts <= lim.max_attempts_ceiling:
            fix = "" if max_attempts < 1 else server_fix("max_attempts_ceiling")
            return _reject(_IA, f"max_attempts must be between 1 and {lim.max_attempts_ceiling}{fix}",
                           "max_attempts", 1 if max_attempts < 1 else lim.max_attempts_ceiling, max_attempts)
        payload = req.payload
        encoding = payload.encoding
        if encoding not in self._encodings:
            elen = utf8_len(encoding)
            if elen > lim.max_encoding_bytes:
                return _reject(_IA, "payload encoding label is too long" + server_fix("max_encoding_bytes"),
                               "payload.encoding",
                               lim.max_encoding_bytes, elen)
            if "\x00" in encoding:  # every backend stores labels as text (docs/decisions.md)
                return _reject(_IA, "payload encoding label contains a NUL character (U+0000)", "payload.encoding")
            self._remember(self._encodings, encoding)
        if custom:
            bad = _first_malformed_custom(custom)
            if bad is not None:
                return bad
        scheduled = has("scheduled_at")
        if scheduled:
            ts = req.scheduled_at
            if not (_TS_MIN <= ts.seconds <= _TS_MAX and 0 <= ts.nanos < 1_000_000_000):
                return _reject(_IA, "scheduled_at is not a valid timestamp", "scheduled_at")
        # 2. QueueNameInvalid.
        queue = req.queue
        if queue not in self._names:
            if not queue:
                return _reject(_QNI, "queue name is empty", "queue")
            qlen = utf8_len(queue)
            if qlen > lim.max_queue_name_bytes:
                return _reject(_QNI, "queue name is too long" + server_fix("max_queue_name_bytes"), "queue",
                               lim.max_queue_name_bytes, qlen)
            if _QUEUE_NAME.fullmatch(queue) is None:
                return _reject(_QNI, "queue name must match [A-Za-z0-9][A-Za-z0-9._:-]*", "queue")
            self._remember(self._names, queue)
        # 3. JobTypeInvalid.
        job_type = req.job_type
        if job_type not in self._types:
            if not job_type:
                return _reject(_JTI, "job type is empty", "job_type")
            jlen = utf8_len(job_type)
            if jlen > lim.max_job_type_bytes:
                return _reject(_JTI, "job type is too long" + server_fix("max_job_type_bytes"), "job_type",
                               lim.max_job_type_bytes, jlen)
            if _CONTROL.search(job_type) is not None:
                return _reject(_JTI, "job type contains control characters", "job_type")
            self._remember(self._types, job_type)
        # 4. UnknownQueue.
        qlim = self.queue_limits(queue)
        if qlim is None:
            return _reject(_UQ, f"queue {quote(queue)} is not declared (strict mode)", "queue")
        if isinstance(qlim, QueueRefused):
            return _reject(_UQ, f"queue {quote(queue)} does not exist and {qlim.why}", "queue", qlim.limit,
                           qlim.actual)
        # 5. PayloadTooLarge.
        data = payload.data
        size = len(data)
        if size > qlim.max_payload_bytes:
            return _reject(_PTL, "payload is larger than the queue's max_payload_bytes"
                           + queue_fix(queue, "max-payload-bytes"), "payload.data",
                           qlim.max_payload_bytes, size)
        # 6. EncodingNotAllowed.
        if qlim.allowed_encodings and encoding not in qlim.allowed_encodings:
            return _reject(_ENA, f"encoding {quote(encoding)} is not allowed on this queue; to allow it: "
                           f"sepp queues declare {clip(queue)} --allowed-encoding LABEL (once per label it takes, "
                           "'*' for any)", "payload.encoding")
        if custom:
            # 7–9. Custom map bounds.
            bad = _custom_bounds(custom, qlim, queue)
            if bad is not None:
                return bad
        # 10. ScheduledTooFar.
        at_ns = None
        if scheduled:
            ts = req.scheduled_at
            at_ns = ts.seconds * 1_000_000_000 + ts.nanos
            horizon_ns = int(lim.max_schedule_horizon * 1_000_000_000)
            if at_ns > now_ns + horizon_ns:
                ahead_s = math.ceil((at_ns - now_ns) / 1_000_000_000)
                return _reject(_STF, "scheduled_at is further ahead than max_schedule_horizon"
                               + server_fix("max_schedule_horizon"),
                               "scheduled_at", int(lim.max_schedule_horizon), ahead_s)
        # 11. IdempotencyKeyTooLong.
        key = req.idempotency_key
        if key:
            klen = utf8_len(key)
            if klen > lim.max_idempotency_key_bytes:
                return _reject(_IKTL, "idempotency key is too long" + server_fix("max_idempotency_key_bytes"),
                               "idempotency_key",
                               lim.max_idempotency_key_bytes, klen)
            if "\x00" in key:  # every backend stores keys as text (docs/decisions.md)
                return _reject(_IA, "idempotency key contains a NUL character (U+0000)", "idempotency_key")
        # 12. TraceContextInvalid.
        trace = req.trace_context
        if trace:
            bad_trace = _trace_rejection(trace, lim)
            if bad_trace is not None:
                return bad_trace
        # 13. DependenciesTooMany (and a malformed id: InvalidArgument).
        if req.depends_on:
            deps = dependency_ids(req.depends_on)
            if type(deps) is pb.Rejection:
                return deps
        if req.on_dependency_failure and req.on_dependency_failure not in _DEP_POLICIES:
            return _reject(_IA, f"on_dependency_failure {req.on_dependency_failure} is not one of CANCEL, RUN, WAIT",
                           "on_dependency_failure")
        return (queue, job_type, data, encoding, priority, max_attempts, at_ns, bool(custom or trace), key or None)


def _first_malformed_custom(custom: Mapping[str, pb.CustomValue]) -> pb.Rejection | None:
    bad: list[tuple[str, str]] = []
    for key, value in custom.items():
        kind = value.WhichOneof("kind")
        if not key:
            bad.append((key, "custom key is empty"))
        elif kind is None:
            bad.append((key, f"custom value {quote(key)} has no type"))
        elif kind == "float_value" and not math.isfinite(value.float_value):
            bad.append((key, f"custom value {quote(key)} is not a finite float"))
    if not bad:
        return None
    key, message = min(bad)
    return _reject(_IA, message, f"custom[{clip(key)}]")


def _custom_bounds(custom: Mapping[str, pb.CustomValue], qlim: QueueLimits, queue: str) -> pb.Rejection | None:
    count = len(custom)
    if count > qlim.max_custom_entries:
        return _reject(_CETM, "custom map has too many entries" + queue_fix(queue, "max-custom-entries"), "custom",
                       qlim.max_custom_entries, count)
    total = 0
    too_long: str | None = None
    max_key = qlim.max_custom_key_bytes
    for key, value in custom.items():
        klen = utf8_len(key)
        if klen > max_key and (too_long is None or key < too_long):
            too_long = key
        total += klen + custom_value_size(value)
    if too_long is not None:
        return _reject(_CKTL, "custom key is too long" + queue_fix(queue, "max-custom-key-bytes"),
                       f"custom[{clip(too_long)}]", max_key, utf8_len(too_long))
    if total > qlim.max_custom_bytes:
        return _reject(_CMTL, "custom map is larger than max_custom_bytes" + queue_fix(queue, "max-custom-bytes"),
                       "custom", qlim.max_custom_bytes, total)
    return None


def _trace_rejection(trace: Mapping[str, str], lim: ServerLimits) -> pb.Rejection | None:
    count = len(trace)
    if count > lim.max_trace_entries:
        return _reject(_TCI, "trace context has too many entries" + server_fix("max_trace_entries"), "trace_context",
                       lim.max_trace_entries, count)
    # Keys are bounded too (the settings bound only count and value size): a fixed
    # MAX_TRACE_KEY_BYTES, far above any propagation header name (traceparent, tracestate, baggage).
    too_long = sorted(k for k in trace if utf8_len(k) > MAX_TRACE_KEY_BYTES)
    if too_long:
        key = too_long[0]
        return _reject(_TCI, f"trace context key is too long (a fixed limit: {MAX_TRACE_KEY_BYTES} bytes)",
                       f"trace_context[{clip(key)}]",
                       MAX_TRACE_KEY_BYTES, utf8_len(key))
    long_keys = sorted(k for k, v in trace.items() if utf8_len(v) > lim.max_trace_value_bytes)
    if long_keys:
        key = long_keys[0]
        return _reject(_TCI, "trace context value is too long" + server_fix("max_trace_value_bytes"),
                       f"trace_context[{clip(key)}]",
                       lim.max_trace_value_bytes, utf8_len(trace[key]))
    parent = trace.get("traceparent")
    if parent is not None and not traceparent_valid(parent):
        return _reject(_TCI, "traceparent is not a valid W3C traceparent", "trace_context[traceparent]")
    return None
