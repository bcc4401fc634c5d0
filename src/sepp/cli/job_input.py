"""What ``sepp enqueue`` reads a job from: ``--custom KEY=VALUE`` specs (``parse_custom``),
a batch file's JSON lines (``read_batch_lines``: one ``EnqueueRequest`` per line, the
command-line values as ``JobDefaults``) and a line's payload. Pure parsing: each raises
``ValueError`` with the line and key it is about."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sepp.cli.shell import parse_when
from sepp.request import INT64_MAX, INT64_MIN, CustomPrimitive, EnqueueRequest, Payload

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_TYPES = ("int", "float", "bool", "str")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_LINE_KEYS = {"queue", "job_type", "payload", "custom", "priority", "max_attempts", "scheduled_at",
              "idempotency_key", "trace_context"}

CUSTOM_HELP = (
    "Custom entry KEY=VALUE, repeatable. Type it with KEY:int=42, KEY:float=1.5, KEY:bool=true "
    "(true/false/yes/no/on/off/1/0) or KEY:str=007. Untyped values are inferred like JSON literals: "
    "true/false is a bool, a JSON number is an int (no fraction or exponent) or a float, anything else "
    "(including 007, +1, nan) is a string."
)


# ----------------------------------------------------------------- pure parsing helpers


def parse_custom(spec: str) -> tuple[str, CustomPrimitive]:
    """Parse one ``--custom`` argument into ``(key, typed value)``.

    ``KEY:TYPE=VALUE`` with TYPE in int/float/bool/str is explicit; ``KEY=VALUE`` is
    inferred (see ``CUSTOM_HELP``). The key is split at the first ``=``, so a key may
    contain ``:`` as long as it does not end in ``:int`` etc.

    Raises:
        ValueError: no ``=``, a value that does not parse as its type, or an int
            outside int64.
    """
    left, sep, raw = spec.partition("=")
    if not sep:
        raise ValueError(f"custom entry {spec!r} must look like KEY=VALUE or KEY:TYPE=VALUE")
    key, colon, type_name = left.rpartition(":")
    if not colon or type_name not in _TYPES:
        key, type_name = left, ""
    value: CustomPrimitive
    if type_name == "str":
        value = raw
    elif type_name == "bool":
        low = raw.strip().lower()
        if low not in _TRUE | _FALSE:
            raise ValueError(f"custom[{key}]: {raw!r} is not a bool (true/false/yes/no/on/off/1/0)")
        value = low in _TRUE
    elif type_name == "int":
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"custom[{key}]: {raw!r} is not an int") from None
    elif type_name == "float":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"custom[{key}]: {raw!r} is not a float") from None
    elif raw in ("true", "false"):
        value = raw == "true"
    elif (number := _JSON_NUMBER.fullmatch(raw)) is not None:
        value = float(raw) if number.group(1) or number.group(2) else int(raw)
    else:
        value = raw
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"custom[{key}]: {raw} does not fit in int64 (use {key}:str=... or {key}:float=...)")
    return key, value


def payload_from_json_value(value: Any) -> Payload | None:
    """A batch line's ``payload``: ``null`` = none; ``{"data_b64": …, "encoding": …}`` = raw
    bytes (base64); any other JSON value is sent as JSON (``application/json``).

    Raises ``ValueError`` for bad base64 or a non-string encoding.
    """
    if value is None:
        return None
    if isinstance(value, dict) and "data_b64" in value and set(value) <= {"data_b64", "encoding"}:
        encoding = value.get("encoding", "")
        if not isinstance(value["data_b64"], str) or not isinstance(encoding, str):
            raise ValueError("payload data_b64 and encoding must be strings")
        try:
            data = base64.b64decode(value["data_b64"], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"payload data_b64 is not valid base64: {exc}") from None
        return Payload(data, encoding)
    return Payload.json(value)


@dataclass(frozen=True, slots=True)
class JobDefaults:
    """Values from the command line that a batch line inherits when it does not set them."""

    queue: str | None = None
    job_type: str | None = None
    custom: Mapping[str, CustomPrimitive] | None = None
    priority: int | None = None
    max_attempts: int | None = None
    scheduled_at: dt.datetime | None = None


def request_from_line(obj: Any, defaults: JobDefaults) -> EnqueueRequest:
    """Build one ``EnqueueRequest`` from a parsed batch-file line (a JSON object).

    Keys: queue, job_type, payload, custom, priority, max_attempts, scheduled_at
    (ISO 8601 with zone), idempotency_key, trace_context. Unknown keys are errors.

    Raises:
        ValueError: missing queue/job_type, unknown keys, values of the wrong shape.
        TypeError/OverflowError: from ``EnqueueRequest`` (e.g. an int outside int64).
    """
    if not isinstance(obj, dict):
        raise ValueError("each line must be a JSON object")
    unknown = set(obj) - _LINE_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; allowed: {sorted(_LINE_KEYS)}")
    queue = obj.get("queue", defaults.queue)
    job_type = obj.get("job_type", defaults.job_type)
    if queue is None or job_type is None:
        raise ValueError("queue and job_type are required (in the line or as arguments)")
    custom = dict(defaults.custom or {})
    line_custom = obj.get("custom") or {}
    if not isinstance(line_custom, dict):
        raise ValueError("custom must be a JSON object")
    custom.update(line_custom)
    when = defaults.scheduled_at
    if obj.get("scheduled_at") is not None:
        if not isinstance(obj["scheduled_at"], str):
            raise ValueError("scheduled_at must be an ISO 8601 string")
        when = parse_when(obj["scheduled_at"])
    return EnqueueRequest(
        queue,
        job_type,
        payload=payload_from_json_value(obj.get("payload")),
        custom=custom,
        priority=obj.get("priority", defaults.priority),
        max_attempts=obj.get("max_attempts", defaults.max_attempts),
        scheduled_at=when,
        idempotency_key=obj.get("idempotency_key"),
        trace_context=obj.get("trace_context") or {},
    )


def read_batch_lines(text: str, defaults: JobDefaults) -> list[tuple[int, EnqueueRequest]]:
    """Parse a JSON-lines batch file into ``(line number, request)``; blank lines are skipped.

    Raises ``ValueError`` naming the first bad line: ``line 2: not valid JSON (Expecting
    property name enclosed in double quotes, column 2); each line must hold one whole JSON
    object`` — the column within that line (``json``'s own message would also say "line 1",
    of the one-line text it was given).
    """
    out: list[tuple[int, EnqueueRequest]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not valid JSON ({exc.msg}, column {exc.colno}); "
                             "each line must hold one whole JSON object") from None
        try:
            out.append((number, request_from_line(obj, defaults)))
        except (ValueError, TypeError, OverflowError) as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return out


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start:start + size]
