"""Limits and queue settings with their documented defaults and maxima.

Shared by server, client and CLI. Sizes are bytes, durations are seconds (float).
These are pydantic models so the server can read them from TOML, ``SEPP_*``
variables and the admin API with validation; all are frozen.

Every duration and count has an upper bound, so no
setting can overflow the server's int64 microsecond arithmetic or a proto field: the
per-field table is in docs/configuration.md, the reasoning in docs/decisions.md.
``clamp_settings`` turns a stored (possibly out-of-range) settings row into valid
settings instead of failing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from sepp.hard_limits import (  # noqa: F401 - re-exported: sepp.limits is where users find them
    DAY,
    HOUR,
    MAX_ALLOWED_ENCODINGS,
    MAX_ATTEMPTS,
    MAX_BACKOFF,
    MAX_DURATION_SECONDS,
    MAX_HORIZON,
    MAX_LEASE,
    MAX_PROGRESS_BYTES,
    MAX_QUEUES,
    MAX_RETENTION,
    MAX_SETTLE_BATCH,
    MAX_SIZE,
    MAX_TIMESTAMP_SECONDS,
    MAX_TRACE_KEY_BYTES,
    MAX_WAIT_JOBS,
    MAX_WAIT_SECONDS,
    MIN_LEASE,
    MIN_TIMESTAMP_SECONDS,
    YEAR,
    GiB,
    KiB,
    MiB,
    fmt_number,
)

#: Longest ``rate_limit`` text accepted.
MAX_RATE_TEXT = 32
#: Seconds of each ``rate_limit`` unit, and back.
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": HOUR, "d": DAY}
_UNIT_OF = {v: k for k, v in RATE_UNITS.items()}


def parse_rate(text: str) -> tuple[int, float]:
    """A ``rate_limit`` as (count, period in seconds): ``"50/s"`` → (50, 1.0), ``"1000/m"`` →
    (1000, 60.0). Count 1 .. 2,147,483,647, unit s, m, h or d; spaces around the parts are
    allowed. Raises ``ValueError`` with a message naming the expected form."""
    count, sep, unit = text.strip().partition("/")
    count, unit = count.strip(), unit.strip().lower()
    if not sep or not (count.isascii() and count.isdigit()) or unit not in RATE_UNITS:
        raise ValueError(f"{clip_repr(text, 40)} is not a rate; use <count>/<unit> with unit s, m, h or d, "
                         "e.g. \"50/s\" or \"1000/m\" (empty = unlimited)")
    amount = int(count)
    if not 1 <= amount <= MAX_SIZE:
        raise ValueError(f"the count of rate {clip_repr(text, 40)} must be between 1 and {MAX_SIZE}")
    return amount, RATE_UNITS[unit]


class QueueLimits(BaseModel):
    """Per-queue limits a request is validated against (docs/errors.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Largest ``payload.data`` accepted, bytes; equal is allowed (1 MiB default).
    #: Also at most the server's ``max_message_bytes`` (checked where both are known).
    max_payload_bytes: int = Field(default=1 * MiB, ge=0, le=MAX_SIZE)
    #: When non-empty, the only encoding labels accepted (exact match); at most 64 labels,
    #: each at most the server's ``max_encoding_bytes`` (``long_encoding_label``).
    allowed_encodings: tuple[str, ...] = Field(default=(), max_length=MAX_ALLOWED_ENCODINGS)
    #: Most custom-map entries.
    max_custom_entries: int = Field(default=32, ge=0, le=MAX_SIZE)
    #: Longest custom key, UTF-8 bytes.
    max_custom_key_bytes: int = Field(default=64, ge=1, le=MAX_SIZE)
    #: Largest custom map, Σ(key bytes + value size), bytes.
    max_custom_bytes: int = Field(default=8192, ge=0, le=MAX_SIZE)
    #: Largest job result (what a handler returns, stored with its ack) accepted, bytes;
    #: equal is allowed (1 MiB default). Also at most the server's ``max_message_bytes``.
    max_result_bytes: int = Field(default=1 * MiB, ge=0, le=MAX_SIZE)


#: The queue limits that are at most the server's ``max_message_bytes`` (a payload travels in
#: one enqueue message, a result in one ack).
MESSAGE_BOUNDED = ("max_payload_bytes", "max_result_bytes")


class QueueSettings(BaseModel):
    """Everything a queue carries besides its name, with its defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    default_priority: int = Field(default=5, ge=0, le=9)
    default_max_attempts: int = Field(default=10, ge=1, le=MAX_ATTEMPTS)
    #: Lease length when Reserve gives none, seconds (1 ms to 1 day, like a Reserve's own).
    lease_duration: float = Field(default=30.0, ge=MIN_LEASE, le=MAX_LEASE)
    #: Idempotency window, seconds, anchored at the original enqueue; ≤ 10 years.
    dedup_window: float = Field(default=DAY, ge=0, le=MAX_RETENTION)
    #: Retry backoff: base × 2^(attempt−1), capped, ± jitter fraction; ≤ 365 days.
    retry_base: float = Field(default=1.0, ge=0, le=MAX_BACKOFF)
    retry_cap: float = Field(default=HOUR, ge=0, le=MAX_BACKOFF)
    retry_jitter: float = Field(default=0.2, ge=0, le=1)
    #: How long COMPLETED jobs are kept, seconds; ≤ 10 years.
    completed_retention: float = Field(default=DAY, ge=0, le=MAX_RETENTION)
    #: How long DEAD_LETTERED (and CANCELLED) jobs are kept, seconds; ≤ 10 years.
    dead_letter_retention: float = Field(default=14 * DAY, ge=0, le=MAX_RETENTION)
    limits: QueueLimits = QueueLimits()
    #: Most jobs of the queue RESERVED at once, across every worker and node; 0 = unlimited
    #: (docs/flow-control.md).
    max_in_flight: int = Field(default=0, ge=0, le=MAX_SIZE)
    #: Most reservations per period, ``"<count>/<unit>"`` with unit s, m, h or d (``"50/s"``,
    #: ``"1000/m"``): a token bucket refilled evenly over the period; "" = unlimited.
    rate_limit: str = Field(default="", max_length=MAX_RATE_TEXT)
    #: The bucket's size: most reservations at once after an idle spell; 0 = the per-period
    #: amount of ``rate_limit``.
    rate_burst: int = Field(default=0, ge=0, le=MAX_SIZE)

    #: The custom-map entry whose value groups the queue's jobs for ``max_in_flight_per_key``
    #: (e.g. ``"tenant_id"``); jobs without the entry form one group of their own.
    concurrency_key: str = Field(default="", max_length=MAX_TRACE_KEY_BYTES)
    #: Most jobs RESERVED at once per distinct value of ``concurrency_key``; 0 = unlimited.
    #: Needs ``concurrency_key``.
    max_in_flight_per_key: int = Field(default=0, ge=0, le=MAX_SIZE)

    #: Seconds a queue may hold READY jobs without a Reserve of it from any worker before
    #: the UI and ``sepp queues list`` flag it "no consumer"; 0 = never flagged.
    consumer_timeout: float = Field(default=60.0, ge=0, le=DAY)

    @field_validator("max_in_flight_per_key")
    @classmethod
    def _per_key_needs_a_key(cls, value: int, info: ValidationInfo) -> int:
        """A per-key limit without ``concurrency_key`` would limit nothing: refused."""
        if value and not info.data.get("concurrency_key"):
            raise ValueError("max_in_flight_per_key needs concurrency_key (the custom-map entry that names the group, "
                             "e.g. \"tenant_id\")")
        return value

    @field_validator("concurrency_key")
    @classmethod
    def _key_is_text(cls, value: str) -> str:
        """A custom-map key cannot hold U+0000 (PostgreSQL text) — refused rather than never matching."""
        if "\x00" in value:
            raise ValueError("concurrency_key must not contain a NUL character (U+0000)")
        return value

    @field_validator("rate_limit")
    @classmethod
    def _rate_limit_parses(cls, value: str) -> str:
        """Refuse a rate that does not parse (the error names the field); keep it normalised."""
        if not value.strip():
            return ""
        amount, period = parse_rate(value)
        return f"{amount}/{_UNIT_OF[period]}"


def fit_result_limit(settings: QueueSettings, max_message_bytes: int) -> QueueSettings:
    """``settings`` with ``limits.max_result_bytes`` lowered to ``max_message_bytes`` when it is
    larger and the settings never named it (its 1 MiB default): a server whose message cap is
    below 1 MiB starts, and declares queues, with settings written before results existed. A
    value that was named is left as it is (and refused where it is checked). Keeps what the
    settings name (``model_fields_set``): the config's named keys are what it overlays."""
    lim = settings.limits
    if lim.max_result_bytes <= max_message_bytes or "max_result_bytes" in lim.model_fields_set:
        return settings
    fitted = lim.model_copy(update={"max_result_bytes": max_message_bytes})
    fitted.__pydantic_fields_set__.discard("max_result_bytes")
    out = settings.model_copy(update={"limits": fitted})
    if "limits" not in settings.model_fields_set:
        out.__pydantic_fields_set__.discard("limits")
    return out


class ServerLimits(BaseModel):
    """Server-wide limits. ``max_message_bytes`` is enforced, not advertised."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    max_enqueue_batch: int = Field(default=256, ge=1, le=MAX_SIZE)
    #: Most queues the server holds (declared + created on first enqueue). In non-strict mode an
    #: enqueue that would create one more is refused with UnknownQueue; DeclareQueue of one
    #: more with FAILED_PRECONDITION / QUEUE_LIMIT_REACHED. Not advertised.
    max_queues: int = Field(default=10_000, ge=1, le=MAX_QUEUES)
    #: Ceiling for a job's ``max_attempts``.
    max_attempts_ceiling: int = Field(default=1000, ge=1, le=MAX_ATTEMPTS)
    max_queue_name_bytes: int = Field(default=128, ge=1, le=MAX_SIZE)
    max_job_type_bytes: int = Field(default=256, ge=1, le=MAX_SIZE)
    #: How far ahead ``scheduled_at`` may be, seconds (365 days; at most 10 years).
    max_schedule_horizon: float = Field(default=365 * DAY, gt=0, le=MAX_HORIZON)
    max_idempotency_key_bytes: int = Field(default=256, ge=1, le=MAX_SIZE)
    max_encoding_bytes: int = Field(default=128, ge=1, le=MAX_SIZE)
    #: Entries of a job's trace context (keys are bounded by the fixed MAX_TRACE_KEY_BYTES).
    max_trace_entries: int = Field(default=8, ge=0, le=MAX_SIZE)
    #: ≥ 55: a traceparent (version 00) is 55 bytes long.
    max_trace_value_bytes: int = Field(default=512, ge=55, le=MAX_SIZE)
    #: Whole gRPC message cap, bytes (16 MiB; at most 2 GiB − 1, gRPC's own cap); always
    #: ≥ every queue's max_payload_bytes and max_result_bytes.
    max_message_bytes: int = Field(default=16 * MiB, ge=1024, le=MAX_SIZE)
    #: Most jobs one Reserve may ask for.
    max_reserve_batch: int = Field(default=256, ge=1, le=MAX_SIZE)
    #: Longest Reserve long-poll, seconds (≤ 30 s).
    max_reserve_wait: float = Field(default=30.0, ge=0, le=30.0)
    #: Longest ``WaitJobs`` long-poll, seconds (60 s; 1 s .. 1 h): a call asking for longer
    #: waits this long and answers empty, and the client asks again. Advertised
    #: (``ServerLimits.max_wait``).
    max_wait_seconds: float = Field(default=60.0, ge=1.0, le=MAX_WAIT_SECONDS)
    #: Longest error detail kept per attempt, bytes (16 KiB).
    max_error_detail_bytes: int = Field(default=16 * KiB, ge=0, le=MAX_SIZE)


# ---------------------------------------------------------------- bounds and clamping


def field_bounds(model: type[BaseModel], name: str) -> tuple[float | None, float | None]:
    """The inclusive (lower, upper) bounds of a numeric field of ``model`` (None = unbounded
    on that side; an exclusive ``gt``/``lt`` is reported as its value)."""
    lo: float | None = None
    hi: float | None = None
    for meta in model.model_fields[name].metadata:
        for attr in ("ge", "gt"):
            if getattr(meta, attr, None) is not None:
                lo = getattr(meta, attr)
        for attr in ("le", "lt"):
            if getattr(meta, attr, None) is not None:
                hi = getattr(meta, attr)
    return lo, hi


def utf8_bytes(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes (a lone surrogate counts as its 3-byte escape)."""
    return len(text.encode("utf-8", "surrogatepass"))


def long_encoding_label(limits: QueueLimits, max_encoding_bytes: int) -> tuple[int, int] | None:
    """(index, UTF-8 length) of the first ``allowed_encodings`` label longer than the server's
    ``max_encoding_bytes`` (such a label could never match an enqueue, which is refused above
    that length), or None when every label fits."""
    for i, label in enumerate(limits.allowed_encodings):
        size = utf8_bytes(label)
        if size > max_encoding_bytes:
            return i, size
    return None


def _clamp_labels(value: Any, default: tuple[str, ...], path: str, max_label: int | None,
                  notes: list[str]) -> tuple[str, ...]:
    if not (isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)):
        notes.append(f"{path}={clip_repr(value)} is not a list of labels; using {default!r}")
        return default
    labels = tuple(value)
    if max_label is not None and any(utf8_bytes(v) > max_label for v in labels):
        labels = tuple(v for v in labels if utf8_bytes(v) <= max_label)
        notes.append(f"{path}: labels longer than max_encoding_bytes ({max_label}) dropped")
    if len(labels) > MAX_ALLOWED_ENCODINGS:
        notes.append(f"{path} has {len(labels)} labels; keeping the first {MAX_ALLOWED_ENCODINGS}")
        labels = labels[:MAX_ALLOWED_ENCODINGS]
    return labels


def clip_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (a stored value may be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def _clamp_fields(model: type[BaseModel], data: Any, defaults: dict[str, Any],
                  prefix: str, max_label: int | None = None) -> tuple[dict[str, Any], list[str]]:
    out = dict(defaults)
    notes: list[str] = []
    if not isinstance(data, Mapping):
        notes.append(f"{prefix.rstrip('.') or 'settings'} is not an object; using the defaults")
        return out, notes
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in model.model_fields:
            notes.append(f"{path} is not a setting; ignored")
            continue
        default = defaults[key]
        if key == "limits":
            out[key], more = _clamp_fields(QueueLimits, value, default, "limits.", max_label)
            notes += more
            continue
        if key == "allowed_encodings":
            out[key] = _clamp_labels(value, default, path, max_label, notes)
            continue
        if isinstance(default, str):  # a text setting (rate_limit, concurrency_key): valid as stored, or the default
            try:
                out[key] = getattr(model.model_validate({key: value}), key)
            except ValidationError:
                notes.append(f"{path}={clip_repr(value)} is not valid; using the default {default!r}")
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            notes.append(f"{path}={clip_repr(value)} is not a finite number; using the default {default!r}")
            continue
        lo, hi = field_bounds(model, key)
        clamped: int | float = value
        if lo is not None and clamped < lo:
            clamped = lo
        if hi is not None and clamped > hi:
            clamped = hi
        clamped = int(clamped) if isinstance(default, int) else float(clamped)
        if clamped != value:
            span = f"{fmt_number(lo) if lo is not None else ''}..{fmt_number(hi) if hi is not None else ''}"
            notes.append(f"{path}={fmt_number(value)} is outside {span}; using {fmt_number(clamped)}")
        out[key] = clamped
    return out, notes


def clamp_settings(data: Any, max_encoding_bytes: int | None = None) -> tuple[QueueSettings, list[str]]:
    """Stored queue settings (decoded JSON) → valid ``QueueSettings`` and what was changed.

    For a row written by an older server ("a stored setting can never make a read
    fail"): an out-of-range number is clamped to its bound, a value of the wrong type or an
    unknown key is replaced by the default / dropped. Each change is one human-readable
    note (``dedup_window=1e13 is outside 0..315360000; using 315360000.0``); no notes means
    the row was valid as stored. ``allowed_encodings`` keeps its first 64 labels, without
    those longer than ``max_encoding_bytes`` when that is given. Never raises.
    """
    fields, notes = _clamp_fields(QueueSettings, data, QueueSettings().model_dump(), "", max_encoding_bytes)
    try:
        return QueueSettings.model_validate(fields), notes
    except ValidationError as exc:  # a combination the per-field pass cannot see
        return QueueSettings(), [*notes, f"the settings are invalid ({exc.error_count()} error(s)); using the defaults"]
