"""An RPC's arguments, checked at the edge: every Duration, Timestamp and count an RPC
carries is checked here before the engine sees it.

Each refusal is an ``InvalidRequest`` (INVALID_ARGUMENT, ErrorInfo reason
``INVALID_ARGUMENT``) whose metadata names the ``field``, the ``limit`` that was crossed
and the ``actual`` value, in seconds for a duration and in seconds since the epoch for a
timestamp, written exactly (``86401``, ``0.0005``, ``9223372036854775807``). The limits
themselves live in ``sepp.limits`` (configurable) and ``sepp.hard_limits`` (fixed) and are
tabled in docs/configuration.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2
from pydantic import ValidationError

from sepp.limits import MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS, fmt_number
from sepp.server.errors import InvalidRequest

_NS = 1_000_000_000
_MAX_NANOS = 999_999_999


def exact_seconds(seconds: int, nanos: int) -> str:
    """``seconds`` + ``nanos`` as exact decimal seconds text (``12``, ``-0.5``, ``1.000000001``)."""
    total = seconds * _NS + nanos
    whole, frac = divmod(abs(total), _NS)
    sign = "-" if total < 0 else ""
    return f"{sign}{whole}" if frac == 0 else f"{sign}{whole}.{frac:09d}".rstrip("0")


def _nanos_ok(field: str, seconds: int, nanos: int) -> None:
    if not -_MAX_NANOS <= nanos <= _MAX_NANOS:
        raise InvalidRequest(f"{field}.nanos must be between -{_MAX_NANOS} and {_MAX_NANOS} (got {nanos})",
                             f"{field}.nanos", _MAX_NANOS if nanos > 0 else -_MAX_NANOS, nanos)
    if (seconds > 0 > nanos) or (seconds < 0 < nanos):
        raise InvalidRequest(f"{field}: seconds and nanos must have the same sign (got {seconds} s, {nanos} ns)",
                             f"{field}.nanos", 0, nanos)


def duration_arg(d: duration_pb2.Duration, field: str, lo: float, hi: float) -> float:
    """A ``Duration`` argument as float seconds, when it is a valid Duration within
    ``lo``..``hi`` seconds (both inclusive).

    Raises ``InvalidRequest`` naming ``field`` (``<field>.nanos`` for nanos outside
    ±999,999,999 or of the other sign than seconds), the bound crossed and the value.
    """
    seconds, nanos = int(d.seconds), int(d.nanos)
    _nanos_ok(field, seconds, nanos)
    total = seconds * _NS + nanos
    value = exact_seconds(seconds, nanos)
    if total < round(lo * _NS):
        raise InvalidRequest(f"{field} must be at least {fmt_number(lo)} s (got {value} s)", field, lo, value)
    if total > round(hi * _NS):
        raise InvalidRequest(f"{field} must be at most {fmt_number(hi)} s (got {value} s)", field, hi, value)
    return seconds + nanos / _NS


def timestamp_arg(t: timestamp_pb2.Timestamp, field: str) -> int:
    """A ``Timestamp`` argument as µs since the epoch (UTC), when it is a valid Timestamp:
    0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z, nanos in 0..999,999,999.

    Raises ``InvalidRequest`` naming ``field`` (or ``<field>.nanos``), the bound crossed
    (seconds since the epoch) and the value.
    """
    seconds, nanos = int(t.seconds), int(t.nanos)
    if not 0 <= nanos <= _MAX_NANOS:
        raise InvalidRequest(f"{field}.nanos must be between 0 and {_MAX_NANOS} (got {nanos})", f"{field}.nanos",
                             0 if nanos < 0 else _MAX_NANOS, nanos)
    if seconds < MIN_TIMESTAMP_SECONDS:
        raise InvalidRequest(f"{field} must not be before 0001-01-01T00:00:00Z ({MIN_TIMESTAMP_SECONDS} s; "
                             f"got {seconds} s)", field, MIN_TIMESTAMP_SECONDS, seconds)
    if seconds > MAX_TIMESTAMP_SECONDS:
        raise InvalidRequest(f"{field} must not be after 9999-12-31T23:59:59Z ({MAX_TIMESTAMP_SECONDS} s; "
                             f"got {seconds} s)", field, MAX_TIMESTAMP_SECONDS, seconds)
    return seconds * 1_000_000 + nanos // 1000


def optional_timestamp(msg: Any, name: str, field: str | None = None) -> int | None:
    """``timestamp_arg`` of ``msg.<name>`` when set, else None (``field`` defaults to ``name``)."""
    return timestamp_arg(getattr(msg, name), field or name) if msg.HasField(name) else None


def invalid_from_pydantic(exc: ValidationError, prefix: Sequence[str] = ()) -> InvalidRequest:
    """The first error of a pydantic ``ValidationError`` as an ``InvalidRequest``: ``field``
    is the dotted location, ``limit`` the bound from the error's context (``le``, ``ge``, …,
    ``max_length`` for a list) when there is one, ``actual`` the value given when it is a
    number (the item count for a list that is too long). The message is ``"<field>: <problem>"``,
    without pydantic's ``Value error, `` in front of a validator's own text."""
    err = exc.errors()[0]
    where = ".".join([*prefix, *(str(p) for p in err["loc"])]) or "settings"
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    limit = next((ctx[k] for k in ("le", "ge", "lt", "gt", "max_length") if k in ctx), None)
    given = err.get("input")
    actual = given if isinstance(given, int | float) and not isinstance(given, bool) else None
    if actual is None and isinstance(ctx.get("actual_length"), int):  # too many items: the count
        actual = ctx["actual_length"]
    shown = f" (got {fmt_number(actual)})" if actual is not None else ""
    problem = str(err["msg"]).removeprefix("Value error, ")   # a validator's own ValueError: its text alone
    return InvalidRequest(f"{where}: {problem}{shown}", where,
                          limit if isinstance(limit, int | float) else None, actual)
