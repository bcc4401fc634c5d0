"""The periodic schedules' operations on SQLite (``Store.load_periodic`` and the
rest), run on the writer connection. Module-level so they pickle (``writer_process``); the
connection comes last. SQL in ``periodic.sql``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from sepp.domain.records import PeriodicRecord, PeriodicRun
from sepp.storage._sql import load_queries

#: The named queries of ``periodic.sql``.
P = load_queries("sepp.storage.sqlite", "periodic.sql")


def _record(row: Sequence[object]) -> PeriodicRecord:
    name, definition, source, paused, since, tick, run_at, job_id, error, updated = row
    return PeriodicRecord(str(name), str(definition), str(source), bool(paused), int(since),  # type: ignore[call-overload]
                          int(tick), int(run_at), bytes(job_id or b""), str(error), int(updated))  # type: ignore[call-overload, arg-type]


def load(names: list[str] | None, conn: sqlite3.Connection) -> list[PeriodicRecord]:
    """``Store.load_periodic``."""
    if names is None:
        rows = conn.execute(P["load_all"]).fetchall()
    else:
        rows = conn.execute(P["load_named"], (json.dumps(names),)).fetchall()
    return [_record(r) for r in rows]


def put(name: str, definition: str, source: str, now: int, conn: sqlite3.Connection) -> bool:
    """``Store.put_periodic``: True when created."""
    existed = conn.execute(P["exists"], (name,)).fetchone() is not None
    conn.execute(P["put"], (name, definition, source, now))
    return not existed


def set_paused(name: str, paused: bool, now: int, conn: sqlite3.Connection) -> PeriodicRecord | None:
    """``Store.set_periodic_paused``."""
    conn.execute(P["set_paused"], (name, int(paused), now))
    rows = load([name], conn)
    return rows[0] if rows else None


def delete(name: str, conn: sqlite3.Connection) -> bool:
    """``Store.delete_periodic``."""
    return conn.execute(P["delete"], (name,)).rowcount > 0


def record_runs(runs: list[PeriodicRun], conn: sqlite3.Connection) -> None:
    """``Store.record_periodic_runs``."""
    conn.executemany(P["record_run"], [(r.name, r.tick, r.job_id, r.error, r.at) for r in runs])
