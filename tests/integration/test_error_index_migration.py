"""Migration 0009 (the error search's index) on SQLite: it backfills the
last error of the DEAD_LETTERED / CANCELLED jobs of a version-8 database, its trigger keeps
the value with every later change (a damaged history reads as none instead of failing the
write), and the error walk reads the covering index alone."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from sepp.storage._sql import migrations
from sepp.storage.admin import JobQuery
from sepp.storage.sqlite import SQLiteStore
from sepp.storage.sqlite.sql import A


def _history(*messages: str) -> str:
    return json.dumps([{"attempt": i + 1, "outcome": "failed", "error_message": m} for i, m in enumerate(messages)])


async def test_a_version_8_database_gets_its_last_errors_and_keeps_them(tmp_path: Path) -> None:
    db = tmp_path / "sepp.db"
    now = time.time_ns() // 1000
    with sqlite3.connect(db) as conn:
        for number, _name, sql in migrations("sepp.storage.sqlite"):
            if number <= 8:
                conn.executescript(f"BEGIN;\n{sql}\n;PRAGMA user_version={number};\nCOMMIT;")
        rows = [(os.urandom(16), "old", "t", state, 5, now, now, 10, b"", "", now if state >= 4 else None, history)
                for state, history in ((5, _history("first", "TLS certificate expired")), (6, _history("refused")),
                                       (2, _history("certificate expired")), (5, "not json"), (5, None))]
        conn.executemany("INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, "
                         "payload, encoding, finished_at, history) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    store = SQLiteStore(tmp_path)
    await store.open()
    try:
        async def found(text: str, state: int) -> list[bytes]:
            page = await store.admin.list_jobs(JobQuery(state=state, error_contains=text), None, 50)
            return [s.record.id for s in page.jobs]

        assert await found("certificate expired", 5) == [rows[0][0]]
        assert await found("first", 5) == []
        assert await found("refused", 6) == [rows[1][0]]
    finally:
        await store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 9
        got = dict(conn.execute("SELECT seq, last_error FROM jobs WHERE state >= 5"))
        assert sorted(got.values(), key=str) == [None, None, "TLS certificate expired", "refused"]
        # The trigger: a new history, a damaged one, a job that becomes CANCELLED.
        conn.execute("UPDATE jobs SET history = ? WHERE seq = 1", (_history("a", "b", "disk full"),))
        conn.execute("UPDATE jobs SET history = X'00ff' WHERE seq = 2")
        conn.execute("UPDATE jobs SET state = 6, finished_at = ? WHERE seq = 3", (now,))
        assert dict(conn.execute("SELECT seq, last_error FROM jobs WHERE seq <= 3")) == {
            1: "disk full", 2: None, 3: "certificate expired"}
        plan = " ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + A["list_failed_errors"], {
            "folded": "x", "state": 5, "queue": "old", "after": 0, "before": 1, "finished_at": 1, "seq": 1,
            "limit": 10}))
        assert "COVERING INDEX jobs_failed" in plan, plan
