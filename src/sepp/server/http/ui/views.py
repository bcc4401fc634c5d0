"""What the UI shows, formatted: times, durations, sizes, payloads and results (text / JSON / hex dump),
queue settings and the job page's context. Pure functions of records; no request
handling here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from sepp.domain.admin import StateCounts
from sepp.domain.records import JobRecord, NodeRecord
from sepp.domain.states import STATE_NAMES, parse_state
from sepp.server.admin import state_name
from sepp.server.errors import InvalidRequest
from sepp.server.rpc.convert import job_to_proto
from sepp.wire import custom_type_name

#: How much of a payload the job page shows (bytes); the rest is summarised.
PAYLOAD_SHOWN = 256 * 1024
HEX_SHOWN = 16 * 1024

#: URL / CSS slug of each state (``dead-lettered``) → state number, from the domain name table.
STATE_SLUGS: dict[str, int] = {name.replace("_", "-"): number for number, name in STATE_NAMES.items()}
#: State number → its slug.
SLUG_OF: dict[int, str] = {number: slug for slug, number in STATE_SLUGS.items()}


def state_param(value: str | None, default: int = 2) -> int:
    """A ``?state=`` value in any spelling (``dead_lettered``, ``DEAD_LETTERED``,
    ``dead-lettered``, ``Dead lettered``, or the number) → its number; ``default``
    (READY) when absent or empty. Raises ``InvalidRequest`` (a 400 page naming the valid
    states) for an unknown one — never silently another state's tab."""
    if value is None or not value.strip():
        return default
    try:
        return parse_state(value)
    except ValueError as exc:
        raise InvalidRequest(str(exc), "state", actual=value[:64]) from None


#: The state tabs in the order the pages show them, a job's life from left to right (DEFERRED
#: first: waiting for its dependencies): (StateCounts field, state number).
TAB_ORDER: tuple[tuple[str, int], ...] = (("deferred", 7), ("scheduled", 1), ("ready", 2), ("reserved", 3),
                                          ("completed", 4), ("dead_lettered", 5), ("cancelled", 6))

#: State number → its ``StateCounts`` field.
STATE_FIELD: dict[int, str] = {number: field for field, number in TAB_ORDER}


def first_state_with_jobs(counts: StateCounts, default: int = 2) -> int:
    """The tab a listing opens on without ``?state=``: the first state, in tab order, that
    has jobs in ``counts`` (a ``StateCounts``); ``default`` (READY) when every one is empty.
    A queue whose jobs all finished opens on its COMPLETED or DEAD_LETTERED jobs, not on an
    empty READY tab."""
    for field, number in TAB_ORDER:
        if getattr(counts, field, 0):
            return number
    return default


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _utc(us: int) -> dt.datetime | None:
    """µs since the epoch → an aware datetime, exactly (no float rounding); None outside
    the years 1–9999 (a damaged row's time: shown as empty)."""
    try:
        return _EPOCH + dt.timedelta(microseconds=us)
    except (OverflowError, TypeError):
        return None


def fmt_time(us: int | None) -> str:
    """µs since the epoch → ``2026-05-01 10:30:05 UTC`` (empty for None or out of range)."""
    when = None if us is None else _utc(us)
    return "" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_iso(us: int | None) -> str:
    """µs since the epoch → ISO 8601 for ``<time datetime>`` (empty for None or out of range)."""
    when = None if us is None else _utc(us)
    return "" if when is None else when.isoformat(timespec="milliseconds")


def fmt_duration(seconds: float | None) -> str:
    """Seconds → ``850 ms``, ``42 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    if seconds is None:
        return "–"
    s = abs(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 3600:
        big, small = f"{int(s // 60)} min", int(s % 60)
        return f"{big} {small} s" if small else big
    if s < 86400:
        big, small = f"{int(s // 3600)} h", int(s % 3600 // 60)
        return f"{big} {small} min" if small else big
    big, small = f"{int(s // 86400)} d", int(s % 86400 // 3600)
    return f"{big} {small} h" if small else big


def fmt_bytes(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``16 MiB``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


def is_json_encoding(encoding: str) -> bool:
    """Whether a payload encoding label means JSON (``application/json``, ``*+json``, ``json``)."""
    label = encoding.split(";", 1)[0].strip().lower()
    return label in ("application/json", "text/json", "json") or label.endswith("+json")


@dataclass(frozen=True, slots=True)
class PayloadView:
    """How the job page shows a payload: ``kind`` is json | text | hex | empty."""

    kind: str
    text: str
    size: int
    truncated: bool


def payload_view(data: bytes, encoding: str) -> PayloadView:
    """Pretty JSON for JSON encodings (when it parses), UTF-8 text when printable, else a hex dump."""
    size = len(data)
    if not data:
        return PayloadView("empty", "", 0, False)
    if is_json_encoding(encoding) and size <= PAYLOAD_SHOWN:
        try:
            return PayloadView("json", json.dumps(json.loads(data), indent=2, ensure_ascii=False), size, False)
        except (ValueError, UnicodeDecodeError):
            pass
    head = data[:PAYLOAD_SHOWN]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if size > PAYLOAD_SHOWN and exc.reason == "unexpected end of data":
            text = head[:exc.start].decode("utf-8")  # a character cut by the display limit
        else:
            return PayloadView("hex", hexdump(data[:HEX_SHOWN]), size, size > HEX_SHOWN)
    if any(ord(c) < 32 and c not in "\n\r\t" for c in text):
        return PayloadView("hex", hexdump(data[:HEX_SHOWN]), size, size > HEX_SHOWN)
    return PayloadView("text", text, size, size > PAYLOAD_SHOWN)


def hexdump(data: bytes) -> str:
    """Classic 16-bytes-a-line dump: offset, hex, printable ASCII."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<47}  {text}")
    return "\n".join(lines)



@dataclass(frozen=True, slots=True)
class ProgressView:
    """How the job page shows a job's latest progress (its JSON text, decoded).

    ``kind`` is fraction | map | text | json: ``fraction`` a number from 0 to 1 (or a map
    with numeric ``done`` and a positive ``total``), shown as a bar with ``percent``
    (0–100, float); ``map`` a JSON object, its ``rows`` (key, value as text) in the
    handler's order; ``text`` a JSON string, shown as is; ``json`` anything else (another
    number, a list, true/false/null, or text that is not JSON), shown as compact JSON or
    as stored. ``text`` holds what is shown beside or instead of the bar."""

    kind: str
    text: str
    percent: float | None = None
    rows: tuple[tuple[str, str], ...] = ()


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def progress_view(text: str) -> ProgressView:
    """A stored progress value (JSON text of at most 4 KiB) → its ``ProgressView``. Never
    raises: text that is not JSON is shown as stored."""
    try:
        value = json.loads(text)
    except ValueError:
        return ProgressView("json", text)
    if _number(value) and 0 <= value <= 1:
        return ProgressView("fraction", f"{value * 100:.1f}%".replace(".0%", "%"), value * 100)
    if isinstance(value, str):
        return ProgressView("text", value)
    if isinstance(value, dict):
        rows = tuple((str(k), _shown(v)) for k, v in value.items())
        done, total = value.get("done"), value.get("total")
        if _number(done) and _number(total) and total > 0 and 0 <= done <= total:
            percent = done / total * 100
            return ProgressView("fraction", f"{percent:.1f}%".replace(".0%", "%"), percent, rows)
        return ProgressView("map", "", None, rows)
    return ProgressView("json", json.dumps(value, ensure_ascii=False))


def settings_rows(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Queue settings as (label, human value) rows; durations in seconds → readable."""
    rows = []
    for key, value in settings.items():
        if key == "limits":
            for lkey, lvalue in value.items():
                shown = ", ".join(lvalue) or "any" if lkey == "allowed_encodings" else (
                    fmt_bytes(lvalue) if lkey.endswith("_bytes") else f"{lvalue:,}")
                rows.append((f"limits.{lkey}", shown))
        elif key in ("lease_duration", "dedup_window", "retry_base", "retry_cap", "completed_retention",
                     "dead_letter_retention", "consumer_timeout"):
            rows.append((key, fmt_duration(float(value))))
        elif key == "retry_jitter":
            rows.append((key, f"±{float(value) * 100:g}%"))
        elif key in _UNLIMITED_AT_ZERO:
            rows.append((key, (f"{value:,}" if isinstance(value, int) else str(value)) if value else "unlimited"))
        elif key == "concurrency_key":
            rows.append((key, str(value) or "none"))
        elif key == "rate_burst":
            rows.append((key, f"{value:,}" if value else "the rate's per-period amount"))
        else:
            rows.append((key, str(value)))
    return rows


#: Flow-control settings whose 0 means "no limit".
_UNLIMITED_AT_ZERO = ("max_in_flight", "rate_limit", "max_in_flight_per_key")


#: COMPLETED, DEAD_LETTERED, CANCELLED: a job in one of them changes no more by itself (its
#: page stops refreshing).
TERMINAL_STATES = frozenset({4, 5, 6})


def live_version(rec: JobRecord) -> str:
    """A short fingerprint (16 hex digits) of what the job page's live part shows of
    ``rec``: every field but the payload and the custom map / trace context (which do not
    change), the result by its size. Equal fingerprints mean nothing to swap in."""
    shown = [value for name, value in zip(rec._fields, rec, strict=True)
             if name not in ("payload", "extras", "result")]
    shown.append(None if rec.result is None else len(rec.result))
    return hashlib.blake2b(repr(shown).encode(), digest_size=8).hexdigest()


def job_context(rec: JobRecord) -> dict[str, Any]:
    """Everything the job page shows of a record (its payload and result each as a
    ``PayloadView``; ``result`` None when the job has none; ``progress`` a ``ProgressView``
    or None; ``terminal`` whether the job is finished, so its page stops refreshing;
    ``version`` its ``live_version``)."""
    job = job_to_proto(rec)
    custom = []
    for key in sorted(job.custom):
        value = job.custom[key]
        kind = custom_type_name(value)
        raw = getattr(value, value.WhichOneof("kind") or "string_value")
        shown = ("true" if raw else "false") if kind == "bool" else (repr(raw) if kind == "float" else str(raw))
        if kind == "float" and not math.isfinite(raw):
            shown = str(raw)
        custom.append((key, kind, shown))
    attempts = []
    previous = None
    for a in rec.attempt_entries():
        started, ended = a.get("started_at"), a.get("ended_at")
        took = (ended - started) / 1e6 if started is not None and ended is not None else None
        # Attempt numbers only grow, except across a redrive (requeue restarts them at 0):
        # mark that row so the table does not read as one history starting over.
        redriven = previous is not None and a.get("attempt", 0) <= previous
        attempts.append({**a, "took": took, "redriven": redriven})
        previous = a.get("attempt", 0)
    # Requeued and not run since: the last entry's number is past the job's own attempt.
    requeued_since = previous is not None and rec.state in (1, 2) and rec.attempt < previous
    result = None if rec.result is None else payload_view(rec.result, rec.result_encoding or "")
    return {"terminal": rec.state in TERMINAL_STATES, "version": live_version(rec),
            "progress": None if not rec.progress else progress_view(rec.progress),
            "title": f"Job {job.id}", "job": job, "rec": rec, "payload": payload_view(rec.payload, rec.encoding),
            "result": result,
            "custom": custom, "trace": sorted(job.trace_context.items()), "attempts": attempts,
            "requeued_since": requeued_since, "leased": rec.state == 3,
            "state_name": state_name(rec.state), "can_cancel": rec.state in (1, 2, 3, 7) and not rec.cancel_requested,
            "can_requeue": rec.state in (5, 6)}


def fmt_ago(seconds: float) -> str:
    """How long ago, for people: ``3 s ago``, ``2 min 5 s ago``; ``just now`` under a
    second (a clock a little ahead of another node's reads as just now too)."""
    if seconds < 1:
        return "just now"
    if seconds < 60:
        return f"{seconds:.0f} s ago"
    return f"{fmt_duration(seconds)} ago"


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node of the cluster as the Nodes page shows it ("the UI shows the
    nodes (name, address, version, last seen)"). ``started_at``/``last_seen`` µs UTC;
    ``seen_ago`` seconds since its last heartbeat; ``gone`` when that is over the
    ``gone_after`` bound (``sepp.server.cluster.NODE_GONE_AFTER``); ``this`` for the node
    serving the page."""

    name: str
    address: str
    version: str
    started_at: int
    last_seen: int
    seen_ago: float
    gone: bool
    this: bool


def node_views(nodes: Sequence[NodeRecord], now: int, this_node: str, gone_after: float) -> list[NodeView]:
    """``nodes`` (``ServerParts.nodes``, by name) at ``now`` (µs UTC): live nodes first, then
    the gone ones, each by name. ``gone_after`` is in seconds."""
    views = []
    for n in nodes:
        ago = max(0.0, (now - n.last_seen) / 1e6)
        views.append(NodeView(n.name, n.address, n.version, n.started_at, n.last_seen, ago, ago > gone_after,
                              n.name == this_node))
    return sorted(views, key=lambda v: (v.gone, v.name))


def storage_label(storage: str, schema: str, data_dir: str, persist_mode: str) -> str:
    """The storage line of the Nodes page: ``PostgreSQL, schema sepp (persist group)`` or
    ``SQLite, data folder ./data (persist group)``. Never the DSN (it may carry a password)."""
    if storage == "postgres":
        return f"PostgreSQL, schema {schema} (persist {persist_mode})"
    return f"SQLite, data folder {data_dir} (persist {persist_mode})"
