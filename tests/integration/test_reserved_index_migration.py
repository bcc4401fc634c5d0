"""PostgreSQL migration 0008 and SQLite migration 0010 (one index over the RESERVED jobs,
docs/decisions.md "One index over the RESERVED jobs"): a database of the version before,
holding RESERVED jobs of several queues, is migrated in place — jobs_leased becomes
``(queue, lease_expires_at) WHERE state = 3``, jobs_reserved is gone — and its leases are
then reclaimed, counted and listed as before; a build that knows only the version before
(the migrator's ``up_to``) refuses the migrated database. One body over both backends:
``_Postgres`` and ``_SQLite`` differ only in how they reach the database."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import asyncpg
import pytest
from support.backends import PG_TEST_DSN, fresh_schema

from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.storage import _sql
from sepp.storage.base import Store
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


class _Database(Protocol):
    #: The version before the one-index migration, and the newest this build knows.
    old: int
    latest: int
    #: How the backend spells the migrated jobs_leased's columns and condition.
    leased: str

    async def migrate(self, up_to: int | None = None) -> tuple[int, int]: ...
    async def insert(self, rows: list[tuple[object, ...]]) -> None: ...
    async def state3_indexes(self) -> dict[str, str]: ...
    def store(self) -> Store: ...


class _Postgres:
    old, latest, leased = 7, pg_schema.latest_version(), "(queue, lease_expires_at) WHERE (state = 3)"

    def __init__(self, conn: asyncpg.Connection, schema: str) -> None:
        self.conn, self.schema = conn, schema

    async def migrate(self, up_to: int | None = None) -> tuple[int, int]:
        return await pg_schema.migrate(self.conn, self.schema, up_to=up_to)

    async def insert(self, rows: list[tuple[object, ...]]) -> None:
        await self.conn.executemany(f"INSERT INTO {self.schema}.jobs ({COLUMNS}) "
                                    f"VALUES ({', '.join(f'${i}' for i in range(1, 16))})", rows)

    async def state3_indexes(self) -> dict[str, str]:
        # This schema's indexes first, their definitions after: pg_indexes may run
        # pg_get_indexdef on any index of the database before filtering, and one dropped
        # meanwhile by a test beside this one fails the query ("could not open relation").
        rows = await self.conn.fetch(
            "WITH mine AS MATERIALIZED (SELECT i.indexrelid AS oid, c.relname AS indexname FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = $1 AND t.relname = 'jobs') "
            "SELECT indexname, pg_get_indexdef(oid) AS indexdef FROM mine", self.schema)
        return {name: definition for name, definition in rows if "state = 3" in definition}

    def store(self) -> Store:
        return PostgresStore(PG_TEST_DSN, schema=self.schema)


class _SQLite:
    old, latest = 9, _sql.migrations("sepp.storage.sqlite")[-1][0]
    leased = "(queue, lease_expires_at) WHERE state = 3"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir, self.db = data_dir, data_dir / "sepp.db"

    def _version(self) -> int:
        with sqlite3.connect(self.db) as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])

    async def migrate(self, up_to: int | None = None) -> tuple[int, int]:
        before = self._version()
        sqlite_schema.connect_writer(self.db, "group", 8, up_to=up_to).close()
        return before, self._version()

    async def insert(self, rows: list[tuple[object, ...]]) -> None:
        with sqlite3.connect(self.db) as conn:
            conn.executemany(f"INSERT INTO jobs ({COLUMNS}) VALUES ({', '.join('?' * 15)})", rows)

    async def state3_indexes(self) -> dict[str, str]:
        with sqlite3.connect(self.db) as conn:
            return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql LIKE "
                                     "'%state = 3%'"))

    def store(self) -> Store:
        return SQLiteStore(self.data_dir)


@pytest.fixture(params=["sqlite", "postgres"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[_Database]:
    if request.param == "sqlite":
        yield _SQLite(tmp_path)
        return
    schema = fresh_schema()
    conn = await asyncpg.connect(PG_TEST_DSN)
    try:
        yield _Postgres(conn, schema)
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


async def test_a_database_of_the_version_before_gets_one_reserved_index(database: _Database) -> None:
    assert await database.migrate(up_to=database.old) == (0, database.old)
    await database.insert(_rows())
    assert await database.migrate() == (database.old, database.latest)
    indexes = await database.state3_indexes()
    assert list(indexes) == ["jobs_leased"], indexes
    assert database.leased in indexes["jobs_leased"]
    store = database.store()
    await store.open()
    try:
        assert (await store.admin.state_counts("b"))["b"].reserved == 2
        assert (await store.admin.state_counts(None))["a"].reserved == 2
        assert await store.admin.reserved_by_worker() == {"w": 5}
        result = await store.reclaim_expired(NOW, 100, POLICY)
        assert (result.count, result.expired) == (4, {"a": 1, "b": 2, "c": 1})
    finally:
        await store.close()
    # A build that knows the version before only refuses the migrated database.
    with pytest.raises(StoreCorrupt, match="newer than this sepp"):
        await database.migrate(up_to=database.old)
