"""Reading damaged job rows (a row whose columns a crash, a bad migration or a hand edit left unreadable).

A row written into the database file behind sepp's back (an old or damaged file, a manual
edit while the server was stopped) can hold a value of the wrong type in any column: text
where a number belongs, a number outside its range, a blob, invalid UTF-8. SQLite stores
it as given. These helpers make such a row readable instead of failing every read that
includes it:

* ``lenient_text`` / ``LenientText``: a ``sqlite3`` ``text_factory`` that decodes invalid
  UTF-8 with U+FFFD replacement characters. It is only installed on the slow path, after
  the default (C) decoding failed (``sqlite3.OperationalError`` "Could not decode to
  UTF-8"), so the hot path keeps the default decoder (``is_decode_error``).
* ``repair_job``: a ``JobRecord`` whose every field has its type and range, each damaged
  field shown as unset (None / 0 / "") or clamped to its range, with one log line per job
  id naming the fields (``damaged_fields`` lists them without logging).

Where a damaged row is met and what happens to it: docs/decisions.md "Damaged rows".
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Sequence
from typing import Any

from sepp.limits import MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS
from sepp.storage.base import JobRecord, State

log = logging.getLogger("sepp.storage")

#: µs range of a google.protobuf.Timestamp (0001-01-01 .. 9999-12-31T23:59:59.999999Z).
MIN_US, MAX_US = MIN_TIMESTAMP_SECONDS * 1_000_000, MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
#: Job states a row may hold (``State``); any other reads as 0 (JOB_STATE_UNSPECIFIED, "unknown").
KNOWN_STATES = frozenset(int(s) for s in State)
#: Job ids whose damage was logged already (at most this many are remembered; then the set
#: starts over, so a database full of damaged rows logs each again only after that many).
_LOGGED_LIMIT = 10_000
_logged: set[bytes | int | str] = set()


def is_decode_error(exc: BaseException) -> bool:
    """True for the ``sqlite3.OperationalError`` the default text decoding raises on a text
    value that is not UTF-8 ("Could not decode to UTF-8 column ...")."""
    return isinstance(exc, sqlite3.OperationalError) and "decode" in str(exc)


def lenient_text(raw: bytes) -> str:
    """A ``text_factory``: UTF-8 text, invalid sequences replaced by U+FFFD."""
    return raw.decode("utf-8", "replace")


class LenientText:
    """A ``text_factory`` that decodes like ``lenient_text`` and counts the values that
    were not valid UTF-8 (``damaged``), so the caller can tell which rows had them."""

    __slots__ = ("damaged",)

    def __init__(self) -> None:
        self.damaged = 0

    def __call__(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.damaged += 1
            return raw.decode("utf-8", "replace")


def fetch_lenient(conn: sqlite3.Connection, sql: str, params: Any = (), one: bool = False) -> Any:
    """Run ``sql`` with the default decoding; when a text value is not UTF-8, run it again
    with ``lenient_text`` (only for this statement). ``fetchone()`` if ``one`` else
    ``fetchall()``. Only for statements without side effects (SELECTs): the second run
    repeats the first."""
    try:
        cur = conn.execute(sql, params)
        return cur.fetchone() if one else cur.fetchall()
    except sqlite3.OperationalError as exc:
        if not is_decode_error(exc):
            raise
    saved = conn.text_factory
    conn.text_factory = lenient_text
    try:
        cur = conn.execute(sql, params)
        return cur.fetchone() if one else cur.fetchall()
    finally:
        conn.text_factory = saved


def _int(value: Any, low: int, high: int, default: int | None) -> int | None:
    """``value`` as an int in [low, high]: a finite REAL is truncated, an int out of range
    clamped; anything else (text, blob, NaN, bool) is ``default``."""
    if isinstance(value, bool):
        return default
    if isinstance(value, float):
        if not math.isfinite(value):
            return default
        value = int(value)
    if not isinstance(value, int):
        return default
    return low if value < low else high if value > high else value


def as_text(value: Any, default: str | None) -> str | None:
    """``value`` as text: a blob decoded as UTF-8 (U+FFFD for what is not), a number in its
    decimal form; None stays ``default``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, int | float):
        return str(value)
    return default


def _blob(value: Any, default: bytes | None) -> bytes | None:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return default


def damaged_fields(rec: JobRecord) -> tuple[JobRecord, list[str]]:
    """``rec`` with every field of the right type and range, and the names of the fields
    that were not (empty for a sound row, which is returned as it is)."""
    fixed: dict[str, Any] = {}
    for name, value in zip(JobRecord._fields, rec, strict=True):
        new: Any
        if name == "id" or name == "lease_id":
            new = value if isinstance(value, bytes) and len(value) == 16 else (b"\0" * 16 if name == "id" else None)
            if name == "lease_id" and value is None:
                new = None
        elif name == "state":
            new = value if isinstance(value, int) and not isinstance(value, bool) and value in KNOWN_STATES else 0
        elif name in ("queue", "job_type", "encoding"):
            new = as_text(value, "")
        elif name in ("idempotency_key", "worker_id", "history", "reason", "node", "progress", "result_encoding"):
            new = as_text(value, None)
        elif name == "payload":
            new = _blob(value, b"")
        elif name in ("extras", "result"):
            new = _blob(value, None) if value is not None else None
        elif name in ("priority", "attempt", "max_attempts"):
            new = _int(value, *_INT32, 0)
        elif name in ("run_at", "enqueued_at"):
            new = _int(value, MIN_US, MAX_US, 0)
        elif name in ("lease_expires_at", "started_at", "finished_at"):
            new = None if value is None else _int(value, MIN_US, MAX_US, None)
        elif name == "cancel_requested":
            new = 1 if _int(value, *_INT64, 0) else 0
        else:  # seq
            new = _int(value, *_INT64, 0)
        if (new is not value and new != value) or type(new) is not type(value):
            fixed[name] = new
    if not fixed:
        return rec, []
    return rec._replace(**fixed), list(fixed)


def repair_job(rec: JobRecord) -> JobRecord:
    """``damaged_fields(rec)[0]``, logging the damaged fields once per job (by id, or by seq
    when the id itself is damaged)."""
    fixed, names = damaged_fields(rec)
    if names:
        key: bytes | int = rec.id if isinstance(rec.id, bytes) and len(rec.id) == 16 else fixed.seq
        note_damaged(key, f"job {describe(rec)}: stored field(s) {', '.join(names)} hold a value of the wrong "
                          "type or out of range; shown as unset or clamped")
    return fixed


def describe(rec: Sequence[Any]) -> str:
    """A job row's id as hex (or its seq when the id is damaged), for log lines: a
    ``JobRecord`` or a raw row whose last column is the seq."""
    job_id, seq = rec[0], (rec.seq if isinstance(rec, JobRecord) else rec[-1])
    return job_id.hex() if isinstance(job_id, bytes) and len(job_id) == 16 else f"with seq {seq!r}"


def note_damaged(key: bytes | int | str, message: str) -> None:
    """Log ``message`` (a warning) unless one was logged for ``key`` already."""
    if key in _logged:
        return
    if len(_logged) >= _LOGGED_LIMIT:
        _logged.clear()
    _logged.add(key)
    log.warning("%s", message)
