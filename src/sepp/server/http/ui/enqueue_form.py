"""The UI's enqueue form → ``EnqueueRequest`` field by field ("Enqueue from the admin UI"),
and the limits the browser checks (from the live ``ServerInfo``).

It builds the wire request because ``JobEngine.enqueue`` takes one (the server's shared
``Validator`` checks the wire message): with ``enqueue_page`` it is one of the two UI modules
the ``api-importers`` contract lets import ``sepp.api``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import secrets
import zoneinfo
from collections.abc import Mapping, Sequence
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.quoting import quote as quote_value
from sepp.wire import duration_to_seconds

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class FormError(Exception):
    """A form field could not be turned into its EnqueueRequest field (shown as InvalidArgument)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def parse_custom_value(key: str, type_name: str, raw: str) -> pb.CustomValue:
    """One custom entry of the form → ``CustomValue`` (int64 range checked; NaN/inf left to
    the server, which rejects them as InvalidArgument). Raises ``FormError``."""
    field = f"custom[{key}]"
    if type_name == "string":
        return pb.CustomValue(string_value=raw)
    if type_name == "int":
        try:
            value = int(raw.strip())
        except ValueError:
            raise FormError(field, f"{raw!r} is not an integer") from None
        if not -(2**63) <= value < 2**63:
            raise FormError(field, f"{raw} does not fit in int64")
        return pb.CustomValue(int_value=value)
    if type_name == "float":
        try:
            return pb.CustomValue(float_value=float(raw.strip()))
        except ValueError:
            raise FormError(field, f"{raw!r} is not a number") from None
    if type_name == "bool":
        low = raw.strip().lower()
        if low not in _TRUE | _FALSE:
            raise FormError(field, f"{raw!r} is not a boolean (true/false)")
        return pb.CustomValue(bool_value=low in _TRUE)
    raise FormError(field, f"unknown custom type {type_name!r}")


def parse_payload(text: str, fmt: str) -> bytes:
    """The payload textarea as bytes: UTF-8 text (browser CRLF line ends → LF), base64 or hex."""
    if fmt == "base64":
        try:
            return base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            raise FormError("payload.data", "the payload is not valid base64") from None
    if fmt == "hex":
        try:
            return bytes.fromhex("".join(text.split()))
        except ValueError:
            raise FormError("payload.data", "the payload is not valid hex") from None
    return text.replace("\r\n", "\n").encode("utf-8")


def parse_schedule(local: str, zone: str) -> dt.datetime:
    """``datetime-local`` value + IANA zone name → aware datetime. Raises ``FormError``."""
    try:
        naive = dt.datetime.fromisoformat(local)
    except ValueError:
        raise FormError("scheduled_at", f"{local!r} is not a date and time") from None
    try:
        tz = zoneinfo.ZoneInfo(zone or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise FormError("scheduled_at", f"unknown time zone {zone!r}") from None
    return naive.replace(tzinfo=tz)


def is_json_encoding(encoding: str) -> bool:
    """Whether an encoding label names JSON: ``application/json`` or any ``…+json`` media
    type, parameters (``; charset=utf-8``) and case ignored."""
    media = encoding.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def check_json(data: bytes, encoding: str) -> None:
    """The form's own check of a JSON payload before anything is sent (an empty
    payload labelled ``application/json`` was stored, and a worker then failed on it every
    attempt). The server stores payload bytes as given (payloads are opaque); this is
    the form helping its user. Raises ``FormError`` (field ``payload.data``)."""
    if not is_json_encoding(encoding):
        return
    if not data.strip():
        raise FormError("payload.data", f"the payload is empty but its encoding is {encoding!r}: write a JSON "
                                        "value (e.g. {} or null), or clear the encoding for an empty payload")
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormError("payload.data", f"the payload is not valid JSON ({exc}) but its encoding is "
                                        f"{encoding!r}") from None


def fresh_idempotency_key() -> str:
    """The key a freshly loaded enqueue form offers: ``ui-`` and 24 random hex
    digits, so submitting the same loaded form twice (a double click, a reload) returns the
    first job (``deduplicated``), while loading the form again offers a new key."""
    return "ui-" + secrets.token_hex(12)


def build_request(form: Mapping[str, str], customs: Sequence[tuple[str, str, str]]) -> pb.EnqueueRequest:
    """Map the enqueue form field by field onto an ``EnqueueRequest``.
    Empty optional fields stay unset. Raises ``FormError`` for a value that has no
    wire form (not a number, bad base64, unknown zone, …)."""
    req = pb.EnqueueRequest(queue=form.get("queue", ""), job_type=form.get("job_type", ""))
    data = parse_payload(form.get("payload", ""), form.get("payload_format", "text"))
    encoding = form.get("encoding", "")
    check_json(data, encoding)
    if data or encoding:
        req.payload.CopyFrom(pb.Payload(data=data, encoding=encoding))
    for key, type_name, raw in customs:
        if not key and not raw:
            continue
        req.custom[key].CopyFrom(parse_custom_value(key, type_name, raw))
    for name in ("priority", "max_attempts"):
        raw = form.get(name, "").strip()
        if raw:
            try:
                number = int(raw)
            except ValueError:
                raise FormError(name, f"{quote_value(raw)} is not an integer") from None
            try:
                setattr(req, name, number)
            except ValueError:  # beyond int32: the server would refuse it anyway
                raise FormError(name, f"{quote_value(raw)} does not fit in int32") from None
    local = form.get("scheduled_at", "").strip()
    if local:
        zone = form.get("scheduled_tz", "UTC")
        when = parse_schedule(local, zone)
        try:
            req.scheduled_at.FromDatetime(when.astimezone(dt.UTC))
        except (OverflowError, ValueError):  # 9999-12-31T23:59 at UTC−12 is past year 9999 in UTC
            raise FormError("scheduled_at", f"{quote_value(local)} in {quote_value(zone)} is outside "
                                           "0001-01-01 .. 9999-12-31 UTC") from None
    key = form.get("idempotency_key", "")
    if key:
        req.idempotency_key = key
    for name in ("traceparent", "tracestate"):
        value = form.get(name, "").strip()
        if value:
            req.trace_context[name] = value
    return req


def limits_json(info: ppb.ServerInfo) -> dict[str, Any]:
    """The limits the browser checks, from server info (embedded as JSON in the form page)."""

    def lim(q: pb.QueueLimits) -> dict[str, Any]:
        return {"max_payload_bytes": q.max_payload_bytes, "allowed_encodings": list(q.allowed_encodings),
                "max_custom_entries": q.max_custom_entries, "max_custom_key_bytes": q.max_custom_key_bytes,
                "max_custom_bytes": q.max_custom_bytes}

    s = info.limits
    return {
        "strict": info.strict,
        "server": {"max_attempts_ceiling": s.max_attempts_ceiling, "max_queue_name_bytes": s.max_queue_name_bytes,
                   "max_job_type_bytes": s.max_job_type_bytes,
                   "max_schedule_horizon": duration_to_seconds(s.max_schedule_horizon),
                   "max_idempotency_key_bytes": s.max_idempotency_key_bytes,
                   "max_encoding_bytes": s.max_encoding_bytes, "max_trace_entries": s.max_trace_entries,
                   "max_trace_value_bytes": s.max_trace_value_bytes},
        "defaults": lim(info.queue_defaults.limits),
        "queues": {q.name: lim(q.settings.limits) for q in info.queues},
    }
