"""PostgreSQL migration 0008 and SQLite migration 0010 (one index over the RESERVED jobs,
docs/decisions.md "One index over the RESERVED jobs"): a database of the version before,
holding RESERVED jobs of several queues, is migrated in place — jobs_leased becomes
``(queue, lease_expires_at) WHERE state = 3``, jobs_reserved is gone — and its leases are
then reclaimed, counted and listed as before; a build that knows only the version before
refuses the migrated database."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import asyncpg
import pytest
from support.backends import PG_TEST_DSN, fresh_schema

from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.storage import _sql
from sepp.storage.errors import StoreCorrupt
from sepp.storage.postgres import schema as pg_schema
from sepp.storage.postgres.store import PostgresStore
from sepp.storage.sqlite import SQLiteStore
from sepp.storage.sqlite import schema as sqlite_schema

NOW = 1_790_000_000_000_000
S = 1_000_000
POLICY = PolicyTable(QueuePolicy(jitter=0.0))
#: (queue, lease expiry) of the RESERVED jobs put in the old database.
LEASES = [("b", NOW - 3 * S), ("a", NOW - 1 * S), ("b", NOW - 2 * S), ("a", NOW + 60 * S), ("c", NOW - 5 * S)]
COLUMNS = "id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload, encoding, " \
          "lease_id, lease_expires_at, worker_id, started_at"


def _rows() -> list[tuple[object, ...]]:
    return [(os.urandom(16), q, "t", 3, 0, NOW, NOW, 1, 3, b"p", "", b"L" * 16, exp, "w", NOW - 10 * S)
            for q, exp in LEASES]


async def test_a_version_7_postgres_schema_gets_one_reserved_index(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = fresh_schema()
    conn = await asyncpg.connect(PG_TEST_DSN)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
        await conn.execute(f"CREATE TABLE {schema}.schema_migrations (version integer PRIMARY KEY, name text NOT "
                           "NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        await conn.execute(f"SET search_path = {schema}")
        for number, name, sql in _sql.migrations("sepp.storage.postgres"):
            if number <= 7:
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", number, name)
        await conn.executemany(f"INSERT INTO jobs ({COLUMNS}) VALUES ({', '.join(f'${i}' for i in range(1, 16))})",
                               _rows())
        assert await pg_schema.migrate(conn, schema) == (7, pg_schema.latest_version())
        indexes = dict(await conn.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 "
                                        "AND tablename = 'jobs' AND indexdef LIKE '%state = 3%'", schema))
        assert list(indexes) == ["jobs_leased"], indexes
        assert "(queue, lease_expires_at) WHERE (state = 3)" in indexes["jobs_leased"]
        store = PostgresStore(PG_TEST_DSN, schema=schema)
        await store.open()
        try:
            assert (await store.admin.state_counts("b"))["b"].reserved == 2
            assert (await store.admin.state_counts(None))["a"].reserved == 2
            assert await store.admin.reserved_by_worker() == {"w": 5}
            result = await store.reclaim_expired(NOW, 100, POLICY)
            assert (result.count, result.expired) == (4, {"a": 1, "b": 2, "c": 1})
        finally:
            await store.close()
        # A build that knows version 7 only refuses the migrated schema.
        monkeypatch.setattr(pg_schema, "migrations", lambda _pkg: [m for m in _sql.migrations(_pkg) if m[0] <= 7])
        with pytest.raises(StoreCorrupt, match="newer than this sepp"):
            await pg_schema.migrate(conn, schema)
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


async def test_a_version_9_sqlite_database_gets_one_reserved_index(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "sepp.db"
    with sqlite3.connect(db) as conn:
        for number, _name, sql in _sql.migrations("sepp.storage.sqlite"):
            if number <= 9:
                conn.executescript(f"BEGIN;\n{sql}\n;PRAGMA user_version={number};\nCOMMIT;")
        conn.executemany(f"INSERT INTO jobs ({COLUMNS}) VALUES ({', '.join('?' * 15)})", _rows())
    store = SQLiteStore(tmp_path)
    await store.open()
    try:
        assert (await store.admin.state_counts("b"))["b"].reserved == 2
        assert (await store.admin.state_counts(None))["a"].reserved == 2
        assert await store.admin.reserved_by_worker() == {"w": 5}
        result = await store.reclaim_expired(NOW, 100, POLICY)
        assert (result.count, result.expired) == (4, {"a": 1, "b": 2, "c": 1})
    finally:
        await store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 10
        indexes = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql LIKE "
                                    "'%state = 3%'"))
        assert list(indexes) == ["jobs_leased"], indexes
        assert "(queue, lease_expires_at) WHERE state = 3" in indexes["jobs_leased"]
    monkeypatch.setattr(sqlite_schema, "migrations", lambda _pkg: [m for m in _sql.migrations(_pkg) if m[0] <= 9])
    with pytest.raises(StoreCorrupt, match="newer than this sepp"):
        sqlite_schema.connect_writer(db, "group", 8)
