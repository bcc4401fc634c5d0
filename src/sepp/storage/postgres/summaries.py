"""The job listings' rows of the PostgreSQL backend read as ``JobSummary`` (``job_summaries``
of admin.sql): the same summaries as the SQLite backend derives in SQL (sqlite/admin.sql).

Damaged rows: PostgreSQL types every column and text cannot hold invalid UTF-8, so the
SQLite driver's lenient decoding does not apply here. ``repair_job`` is still applied to
listed records (a pure, cheap check) for the values the column types allow and a record
does not (a state no sepp writes, a time outside the protobuf range, an id of the wrong
length), and a history that is not a JSON array reads as none (``attempts``).
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.storage.admin import JobSummary, count_or_zero
from sepp.storage.rows import as_text, repair_job

_COMPLETED = int(State.COMPLETED)


def json_text(value: Any) -> str:
    """A JSON value as SQLite's ``json_extract`` hands it to ``as_text``: text as is, a number
    in decimal (true/false as 1/0), null as "", an array or object as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, str | int | float):
        return as_text(value, "") or ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def attempts(state: Any, history: str | None) -> tuple[int, str]:
    """(attempts recorded, last error) of a listed job, as sqlite/admin.sql job_summaries
    derives them: the entries of ``history`` (a JSON array; anything else reads as none),
    plus the completing attempt of a COMPLETED job whose last entry is not it (it is
    implicit, docs/decisions.md "The completing attempt is implicit"); the last entry's
    ``error_message`` ("" for a COMPLETED job)."""
    entries: list[Any] = []
    if history:
        try:
            parsed = json.loads(history)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            entries = parsed
    last: dict[str, Any] = entries[-1] if entries and isinstance(entries[-1], dict) else {}
    recorded = len(entries)
    if state == _COMPLETED and last.get("outcome") != "completed":
        recorded += 1
    error = "" if state == _COMPLETED else json_text(last.get("error_message"))
    return recorded, error


class SummaryRow(namedtuple("SummaryRow", "seq id queue job_type state priority run_at enqueued_at attempt "
                                          "max_attempts size encoding extras idempotency_key lease_id "
                                          "lease_expires_at worker_id started_at finished_at reason "
                                          "cancel_requested history node")):
    """A row of ``job_summaries``: a listed job without its payload (``size``: its bytes) and
    with its history text."""

    __slots__ = ()


def summary(found: Sequence[Any]) -> JobSummary:
    """A ``job_summaries`` row (``SummaryRow``) as a ``JobSummary``: a value no sepp writes
    reads as unset or clamped (``repair_job``, logged once per job), so one such row never
    fails the page it is on."""
    row = SummaryRow._make(found)
    record = JobRecord(bytes(row.id), row.queue, row.job_type, row.state, row.priority, row.run_at, row.enqueued_at,
                       row.attempt, row.max_attempts, b"", row.encoding,
                       None if row.extras is None else bytes(row.extras), row.idempotency_key,
                       None if row.lease_id is None else bytes(row.lease_id), row.lease_expires_at, row.worker_id,
                       row.started_at, None, row.finished_at, row.reason, row.cancel_requested, row.seq, row.node)
    fixed = repair_job(record)
    recorded, last_error = attempts(row.state, row.history)
    return JobSummary(fixed._replace(cancel_requested=bool(fixed.cancel_requested)), count_or_zero(row.size), recorded,
                      last_error)
