"""The PostgreSQL statements that settle one leased job — found by its id or seq — look it
up by that key even when the planner's statistics say no job is RESERVED (issue 10: many
workers holding many leases).

The partial indexes on RESERVED jobs (``jobs_reserved``: ``(queue) WHERE state = 3``,
``jobs_leased``: ``(lease_expires_at) WHERE state = 3``) look almost free to a planner whose
last ANALYZE saw no RESERVED row, and a statement that says ``state = 3`` may use them:
then every ack, nack or reclaim of one job reads *every* reserved job (measured with 20,480
reserved: 9–15 ms per ack batch of 256 instead of ~2 ms, 2.7–3.5 ms per single-job settle).
So the guard is written ``state::integer = 3`` (the same test, but one the planner cannot
match to those index predicates), and this test pins the plans: statistics taken while
nothing was reserved, autovacuum off for the table, then 20,480 jobs leased.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import uuid_utils
from support.backends import PG_TEST_DSN, StoreSettings, store_settings

from sepp.domain.clock import FakeClock
from sepp.storage.factory import open_store
from sepp.storage.postgres.admin import A
from sepp.storage.postgres.sql import Q
from storage.conformance_kit import NOW

#: Jobs in the table and how many of them are leased after the statistics were taken.
JOBS, LEASED = 24_576, 20_480
LEASE = b"L" * 16

#: Statement name → its parameters (a leased job's id/seq is filled in by the test).
STATEMENTS: dict[str, tuple[Any, ...]] = {
    "complete_one": (NOW, NOW + 1, "SEQ", LEASE),
    "settle_update": (2, NOW, 1, None, None, None, "{}", "SEQ", LEASE),
    "reclaim_ready": (2, "{}", "SEQ", LEASE),
    "bury_leased": (NOW, "damaged", "ID", LEASE),
    "ack_many": (NOW, 1_000_000, ["ID"], [LEASE]),
    "request_cancel": ("SEQ",),
}

#: The statements above, by name (queries.sql and admin.sql).
SQL = {**Q, **A}


@pytest.fixture
async def conn(tmp_path: Path) -> AsyncIterator[asyncpg.Connection]:
    """A migrated schema of its own with ``JOBS`` READY jobs, analyzed, then ``LEASED`` of them
    leased (the statistics still say none is); a connection with it on the search path."""
    settings = store_settings("postgres")
    schema = settings["postgres"].schema
    store = open_store(StoreSettings(data_dir=tmp_path, **settings), FakeClock(NOW))
    await store.open()
    await store.close()
    connection = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    try:
        await connection.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        rows = [(uuid_utils.uuid7().bytes, "q", "t", 2, 0, NOW, NOW, 3, b"{}", "application/json")
                for _ in range(JOBS)]
        await connection.copy_records_to_table(
            "jobs", records=rows, columns=["id", "queue", "job_type", "state", "priority", "run_at", "enqueued_at",
                                           "max_attempts", "payload", "encoding"])
        await connection.execute("ANALYZE jobs")
        await connection.execute(
            "UPDATE jobs SET state = 3, lease_id = $1, lease_expires_at = $2, worker_id = 'w', attempt = 1 "
            "WHERE seq IN (SELECT seq FROM jobs ORDER BY seq LIMIT $3)", LEASE, NOW + 60_000_000, LEASED)
        yield connection
    finally:
        await connection.close()


async def _plan(conn: asyncpg.Connection, name: str) -> str:
    job_id, seq = await conn.fetchrow("SELECT id, seq FROM jobs WHERE state = 3 ORDER BY seq LIMIT 1 OFFSET 77")
    fill = {"ID": job_id, "SEQ": seq}
    params = [[fill.get(x, x) for x in p] if isinstance(p, list) else fill.get(p, p) if isinstance(p, str) else p
              for p in STATEMENTS[name]]
    # EXPLAIN without ANALYZE: the plan for these parameters, nothing changed.
    return " | ".join(r[0].strip() for r in await conn.fetch("EXPLAIN " + SQL[name], *params))


async def test_a_leased_job_is_looked_up_by_its_key_not_by_the_reserved_indexes(conn: asyncpg.Connection) -> None:
    assert await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 3") == LEASED
    wrong = {}
    for name in sorted(STATEMENTS):
        plan = await _plan(conn, name)
        if "jobs_reserved" in plan or "jobs_leased" in plan or not ("jobs_pkey" in plan or "jobs_id_key" in plan):
            wrong[name] = plan
    assert not wrong, wrong


def test_the_statements_tested_are_the_ones_that_guard_on_reserved() -> None:
    """Every statement of queries.sql and admin.sql written with the guard is in
    ``STATEMENTS`` (a new one gets its plan pinned too), and none of the one-job statements
    that find their job by id or seq still says ``state = 3``."""
    guarded = {name for name, sql in SQL.items() if "state::integer = 3" in sql}
    assert guarded == set(STATEMENTS), guarded ^ set(STATEMENTS)
    one_job = re.compile(r"WHERE (j\.)?(seq|id) = \$\d+(::bigint)? .*\bstate = 3\b", re.S)
    assert not [name for name, sql in SQL.items() if one_job.search(sql)]
