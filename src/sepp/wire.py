"""Proto ↔ Python conversions and the rich-error codec, used by server and client.

Rejections travel as ``google.rpc.Status`` with a ``google.rpc.ErrorInfo`` detail
(domain ``sepp``, reason = UPPER_SNAKE code, metadata = field/limit/actual); a failed
atomic batch adds an ``AtomicRejections`` detail; load shedding adds a
``google.rpc.RetryInfo`` (docs/errors.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from sepp.api.v1 import common_pb2 as pb
from sepp.quoting import QUOTE_LIMIT as QUOTE_LIMIT  # re-exported: bounded quoting of user input
from sepp.quoting import clip as clip
from sepp.quoting import quote as quote
from sepp.rejections import CATALOGUE, ERROR_DOMAIN, Reason, RejectionCode

#: Trailing-metadata key of the binary google.rpc.Status (gRPC rich error model).
STATUS_DETAILS_KEY = "grpc-status-details-bin"

#: Python types a custom value may have.
CustomPrimitive = str | int | float | bool

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def custom_to_proto(value: CustomPrimitive) -> pb.CustomValue:
    """Convert a Python primitive to a ``CustomValue``.

    bool stays bool (checked before int), int must fit int64, float is float64.
    Raises ``TypeError`` for other types and ``OverflowError`` for an int outside int64.
    """
    if isinstance(value, bool):
        return pb.CustomValue(bool_value=value)
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise OverflowError(f"custom int {value} does not fit in int64")
        return pb.CustomValue(int_value=value)
    if isinstance(value, float):
        return pb.CustomValue(float_value=value)
    if isinstance(value, str):
        return pb.CustomValue(string_value=value)
    raise TypeError(f"custom values must be str, int, float or bool, not {type(value).__name__}")


def custom_from_proto(value: pb.CustomValue) -> CustomPrimitive | None:
    """Convert a ``CustomValue`` back to its Python primitive (``None`` if unset)."""
    kind = value.WhichOneof("kind")
    return None if kind is None else getattr(value, kind)  # type: ignore[no-any-return]


def custom_type_name(value: pb.CustomValue) -> str:
    """``string``, ``int``, ``float``, ``bool`` or ``unset``: the type a UI shows."""
    kind = value.WhichOneof("kind")
    return "unset" if kind is None else kind.removesuffix("_value")


def custom_map_from_proto(custom: Mapping[str, pb.CustomValue]) -> dict[str, CustomPrimitive]:
    """A proto custom map as a plain dict, keys sorted."""
    out: dict[str, CustomPrimitive] = {}
    for key in sorted(custom):
        value = custom_from_proto(custom[key])
        if value is not None:
            out[key] = value
    return out


def progress_value(text: str) -> Any:
    """A job's progress as it travels (JSON text) decoded; None when there is none (""); the
    text itself when it does not decode (a damaged row). Raises nothing."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def seconds_to_duration(seconds: float) -> duration_pb2.Duration:
    """A float number of seconds as a ``google.protobuf.Duration``."""
    d = duration_pb2.Duration()
    whole = math.floor(seconds)
    d.seconds = whole
    d.nanos = round((seconds - whole) * 1e9)
    if d.nanos >= 1_000_000_000:
        d.seconds += 1
        d.nanos -= 1_000_000_000
    return d


def duration_to_seconds(d: duration_pb2.Duration) -> float:
    """A ``google.protobuf.Duration`` as float seconds."""
    return d.seconds + d.nanos / 1e9


def varint(n: int) -> bytes:
    """``n`` (≥ 0) as a protobuf base-128 varint: the one home of the hand-written encoders'
    varint (the client's batch writer, the server's Reserve answer, the worker's settle
    batch), bytes as protobuf writes them."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# ---------------------------------------------------------------- rich errors


def rejection_metadata(rejection: pb.Rejection) -> dict[str, str]:
    """The ErrorInfo metadata of a rejection: ``field``, ``limit``, ``actual`` where set."""
    meta: dict[str, str] = {}
    if rejection.field:
        meta["field"] = rejection.field
    if rejection.HasField("limit"):
        meta["limit"] = str(rejection.limit)
    if rejection.HasField("actual"):
        meta["actual"] = str(rejection.actual)
    return meta


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def error_info(reason: str, metadata: Mapping[str, str] | None = None) -> error_details_pb2.ErrorInfo:
    """An ``ErrorInfo`` in sepp's domain."""
    return error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=dict(metadata or {}))


def rejection_status(rejection: pb.Rejection) -> status_pb2.Status:
    """The ``google.rpc.Status`` of a rejected single ``Enqueue``.

    The status code is NOT_FOUND for UnknownQueue and INVALID_ARGUMENT otherwise.
    """
    code = RejectionCode.from_wire(rejection.code)
    status_code = CATALOGUE[code].status.value[0]
    info = error_info(code.reason, rejection_metadata(rejection))
    return status_pb2.Status(code=status_code, message=f"{code.value}: {rejection.message}",
                             details=[_pack(info), _pack(rejection)])


#: Largest ``AtomicRejections`` detail a failed ``EnqueueAtomic`` carries, serialized bytes:
#: with its short summary message the answer stays under gRPC's 8 KiB metadata limit,
#: whatever ``max_enqueue_batch`` is.
MAX_ATOMIC_DETAIL_BYTES = 6 * 1024

#: Failures of an atomic batch named in its status message (and kept with their message
#: when the detail has to be shortened).
ATOMIC_NAMED = 8


def _atomic_detail(rejections: Sequence[pb.IndexedRejection]) -> list[pb.IndexedRejection]:
    """Every failure when they fit in ``MAX_ATOMIC_DETAIL_BYTES``; else every failure with the
    human message kept for the first ``ATOMIC_NAMED`` only (code, field, limit and actual stay);
    else, in index order, as many of those as fit (at least one)."""
    def size(items: Sequence[pb.IndexedRejection]) -> int:
        return sum(item.ByteSize() + 3 for item in items)  # tag + length prefix (< 16 KiB each)

    if size(rejections) <= MAX_ATOMIC_DETAIL_BYTES:
        return list(rejections)
    lean: list[pb.IndexedRejection] = []
    for i, item in enumerate(rejections):
        entry = pb.IndexedRejection()
        entry.CopyFrom(item)
        entry.rejection.field = clip(entry.rejection.field, MAX_METADATA_VALUE_BYTES)
        entry.rejection.message = clip(entry.rejection.message, MAX_METADATA_VALUE_BYTES) if i < ATOMIC_NAMED else ""
        lean.append(entry)
    listed: list[pb.IndexedRejection] = []
    total = 0
    for entry in lean:
        n = entry.ByteSize() + 3
        if listed and total + n > MAX_ATOMIC_DETAIL_BYTES:
            break
        listed.append(entry)
        total += n
    return listed


def atomic_status(rejections: Sequence[pb.IndexedRejection]) -> status_pb2.Status:
    """The INVALID_ARGUMENT status of a failed ``EnqueueAtomic`` listing every (index, rejection)
    — as far as ``MAX_ATOMIC_DETAIL_BYTES`` allows (see ``_atomic_detail``). ErrorInfo
    metadata: ``count`` (every failure), ``listed`` (those in the detail), ``first_index``."""
    first = rejections[0]
    detail = _atomic_detail(rejections)
    summary = ", ".join(
        f"#{r.index} {RejectionCode.from_wire(r.rejection.code).value}" for r in rejections[:ATOMIC_NAMED])
    more = "" if len(rejections) <= ATOMIC_NAMED else f" and {len(rejections) - ATOMIC_NAMED} more"
    if len(detail) < len(rejections):
        more += (f" ({len(rejections) - len(detail)} not listed in the detail: it is capped at "
                 f"{MAX_ATOMIC_DETAIL_BYTES} bytes)")
    info = error_info(Reason.ATOMIC_BATCH_REJECTED, {"count": str(len(rejections)), "listed": str(len(detail)),
                                                "first_index": str(first.index)})
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT,
                             message=f"atomic batch rejected, nothing stored: {summary}{more}",
                             details=[_pack(info), _pack(pb.AtomicRejections(rejections=detail))])


#: Longest status message sent, UTF-8 bytes, and longest ErrorInfo metadata value: a last
#: bound under gRPC's 8 KiB metadata limit (the message travels twice: ``grpc-message`` and
#: inside ``grpc-status-details-bin``), behind the quoting of user input where it is written.
MAX_STATUS_MESSAGE_BYTES = 1024
MAX_METADATA_VALUE_BYTES = 256


def plain_status(code: int, reason: str, message: str,
                 metadata: Mapping[str, str] | None = None) -> status_pb2.Status:
    """A status with just an ErrorInfo (batch-level InvalidArgument, lease errors, …). The
    message is cut to ``MAX_STATUS_MESSAGE_BYTES`` and each metadata value to
    ``MAX_METADATA_VALUE_BYTES`` (no answer exceeds the metadata limit)."""
    meta = {k: clip(v, MAX_METADATA_VALUE_BYTES) for k, v in (metadata or {}).items()}
    return status_pb2.Status(code=code, message=clip(message, MAX_STATUS_MESSAGE_BYTES),
                             details=[_pack(error_info(reason, meta))])


def overloaded_status(retry_after: float, backlog: int) -> status_pb2.Status:
    """RESOURCE_EXHAUSTED + ErrorInfo ``OVERLOADED`` + RetryInfo: the commit backlog is full."""
    retry = error_details_pb2.RetryInfo(retry_delay=seconds_to_duration(retry_after))
    info = error_info(Reason.OVERLOADED, {"backlog": str(backlog)})
    return status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED,
                             message=f"server overloaded (commit backlog {backlog}); retry after {retry_after:.3f}s",
                             details=[_pack(info), _pack(retry)])


def status_from_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> status_pb2.Status | None:
    """Find and parse the binary ``google.rpc.Status`` in trailing metadata, if any."""
    for key, value in metadata or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None


def unpack_details(status: status_pb2.Status) -> dict[str, Any]:
    """The known details of a status keyed by kind: ``error_info``, ``retry_info``,
    ``rejection``, ``atomic``."""
    found: dict[str, Any] = {}
    for detail in status.details:
        for name, cls in (("error_info", error_details_pb2.ErrorInfo), ("retry_info", error_details_pb2.RetryInfo),
                          ("rejection", pb.Rejection), ("atomic", pb.AtomicRejections)):
            if detail.Is(cls.DESCRIPTOR):
                msg = cls()
                detail.Unpack(msg)
                found[name] = msg
    return found


def rejection_from_error_info(info: error_details_pb2.ErrorInfo, message: str = "") -> pb.Rejection:
    """Rebuild a ``Rejection`` from an ErrorInfo (for peers that send only ErrorInfo).

    Raises ``ValueError`` if the reason is not a catalogue code.
    """
    code = RejectionCode.from_wire(info.reason)
    rej = pb.Rejection(code=code.to_wire(), message=message, field=info.metadata.get("field", ""))  # type: ignore[arg-type]
    if "limit" in info.metadata:
        rej.limit = int(info.metadata["limit"])
    if "actual" in info.metadata:
        rej.actual = int(info.metadata["actual"])
    return rej
