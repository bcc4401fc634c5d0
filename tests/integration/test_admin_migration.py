"""Migration 0002 (admin listings and stats) upgrades a version-1 database in place."""

from __future__ import annotations

import os
import sqlite3
import time
from importlib import resources
from pathlib import Path

from sepp.storage.sqlite import SQLiteStore


async def test_a_version_1_database_gets_the_index_and_a_backfilled_last_day(tmp_path: Path) -> None:
    db = tmp_path / "sepp.db"
    v1 = resources.files("sepp.storage.sqlite").joinpath("migrations/0001_initial.sql").read_text("utf-8")
    now = time.time_ns() // 1000
    minute = now // 60_000_000
    with sqlite3.connect(db) as conn:
        conn.executescript(v1 + "\nPRAGMA user_version = 1;")
        rows = [(os.urandom(16), "old", "t", state, 5, now, now, 10, b"", "", finished)
                for state, finished in ((2, None), (4, now), (4, now), (5, now), (4, now - 3 * 86400 * 10**6))]
        conn.executemany("INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, "
                         "payload, encoding, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    store = SQLiteStore(tmp_path)
    await store.open()
    try:
        counts = await store.admin.state_counts(None)
        assert (counts["old"].ready, counts["old"].completed, counts["old"].dead_lettered) == (1, 3, 1)
        series = {(r.queue, r.minute): r for r in await store.admin.throughput(minute - 5)}
        assert series[("old", minute)].enqueued == 5
        assert (series[("old", minute)].completed, series[("old", minute)].dead_lettered) == (2, 1)
    finally:
        await store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 2
        plan = conn.execute("EXPLAIN QUERY PLAN SELECT seq FROM jobs WHERE state >= 4 AND state = 5 AND queue = 'old'")
        assert "jobs_finished" in " ".join(str(r) for r in plan.fetchall())
