"""Every sweep and hot-path query uses an index, never a full scan of ``jobs`` (the
sweeps stay indexed), checked with EXPLAIN QUERY PLAN on a real migrated database."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

import pytest

from sepp.storage import workflow_admin
from sepp.storage.sqlite import SQLiteStore
from sepp.storage.sqlite.sql import A, Q, ack_results_sql, ack_sql, insert_sql
from sepp.storage.sqlite.store import DB_FILE

#: Query name → parameters (values do not matter for the plan).
QUERIES: dict[str, tuple[object, ...]] = {
    "promote_due": (0, 10),
    "next_due": (),
    "expired_leases": (0, 0, 0, 10),
    "due_jobs": (0, 0, 0, 10),
    "purgeable_jobs": (0, 0, 0, 10),
    "expired_keys": (0, 0, "q", "k", 10),
    "promote_one": (1,),
    "prune_one": (1,),
    "prune_key": ("q", "k"),
    "prune_jobs": (0, 10),
    "prune_idempotency": (0, 10),
    "prune_workflow_keys": (0, 10),
    "ready_for_lease": ("q", 10),
    "lease_ready": (b"l" * 16, 0, "w", 0, "q", 10, "n1"),
    "settle_lookup": (b"x" * 16,),
    "settle_update": (2, 0, 1, None, None, None, "{}", 1, b"l" * 16),
    "complete_one": (0, 0, 1, b"l" * 16, None, None),
    "reclaim_ready": (2, "{}", 1, b"l" * 16),
    "get_job": (b"x" * 16,),
    "find_idempotency": ("q", "k"),
    # Flow control: one queue's RESERVED jobs, a range of jobs_leased (migration 0010).
    "count_reserved_in": ("q",),
    "reserved_extras_in": ("q",),
}
#: Admin statements over one queue's RESERVED jobs (jobs_leased, queue first) → parameters.
ADMIN_RESERVED: dict[str, dict[str, object]] = {
    "count_queue": {"queue": "q"},
    "purge_reserved": {"queue": "q", "limit": 10},
    "queue_has_jobs": {"queue": "q"},
    "flow_reserved_extras": {"queue": "q"},
}
#: What a plan may SCAN: the reclaim sweep's list of queues (a CTE) and a constant row.
_NOT_JOBS = re.compile(r"\bSCAN (?!qs\b|CONSTANT ROW\b)")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    folder = Path(tmp_path_factory.mktemp("plans"))

    async def migrate() -> None:
        store = SQLiteStore(folder)
        await store.open()
        await store.close()

    asyncio.run(migrate())
    return sqlite3.connect(folder / DB_FILE)


def _plan(db: sqlite3.Connection, sql: str, params: tuple[object, ...] | dict[str, object]) -> str:
    return " | ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params))


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_query_never_scans_the_jobs_table(db: sqlite3.Connection, name: str) -> None:
    plan = _plan(db, Q[name], QUERIES[name])
    assert not _NOT_JOBS.search(plan), plan  # no table scan and no full index scan either


@pytest.mark.parametrize("name", sorted(ADMIN_RESERVED))
def test_one_queues_reserved_jobs_are_a_range_of_jobs_leased(db: sqlite3.Connection, name: str) -> None:
    plan = _plan(db, A[name], ADMIN_RESERVED[name])
    # (count_queue and queue_has_jobs walk jobs_scheduled for SCHEDULED: a small set.)
    assert not re.search(r"SCAN jobs(?! USING INDEX jobs_scheduled)", plan), plan
    assert "SEARCH jobs USING INDEX jobs_leased (queue=?)" in plan, plan


def test_the_reclaim_sweep_walks_jobs_leased_queue_by_queue(db: sqlite3.Connection) -> None:
    """``expired_leases``: the queues by a skip scan of jobs_leased (one seek each), then
    one range (queue, expiry) per queue; the rows by seq."""
    plan = _plan(db, Q["expired_leases"], QUERIES["expired_leases"])
    assert "SEARCH jobs USING INDEX jobs_leased (queue>?)" in plan, plan
    assert "SEARCH jobs USING INDEX jobs_leased (queue=? AND lease_expires_at>? AND lease_expires_at<?)" in plan, plan
    assert "SEARCH j USING INTEGER PRIMARY KEY (rowid=?)" in plan, plan


def test_batched_acks_probe_jobs_by_id(db: sqlite3.Connection) -> None:
    plan = _plan(db, ack_sql(2), (0, 0, b"a" * 16, b"b" * 16, b"c" * 16, b"d" * 16))
    assert "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)" in plan, plan
    # The same statement with a result per ack (ack_many_results_head): the same probe.
    with_results = _plan(db, ack_results_sql(2), (0, 0, b"a" * 16, b"b" * 16, b"r", "text/plain",
                                                  b"c" * 16, b"d" * 16, None, None))
    assert "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)" in with_results, with_results


def test_a_multi_row_insert_takes_twelve_values_per_row(db: sqlite3.Connection) -> None:
    assert insert_sql(3).count("?") == 36


def test_a_multi_row_insert_binds_a_shared_column_once() -> None:
    # queue shared, everything else per row: ?1 is the queue of all three rows.
    sql = insert_sql(3, (True,) + (False,) * 9)
    assert sql.count("?1,") == 3 and "?34" in sql and "?35" not in sql


def test_the_retries_listing_walks_only_jobs_retrying(db: sqlite3.Connection) -> None:
    """The Retries view (migration 0011) reads the retry index, never jobs_scheduled's
    first-run jobs nor the table."""
    plan = _plan(db, A["list_retrying"], {"run_at": 0, "seq": 0, "queue": None, "job_type": None, "limit": 50})
    assert "USING INDEX jobs_retrying" in plan and not re.search(r"SCAN jobs(?! USING INDEX jobs_retrying)", plan), \
        plan


@pytest.mark.parametrize("name", ["LIST", "NODES", "CANCEL_ROWS"])
def test_the_workflow_reads_seek_the_workflow_index(db: sqlite3.Connection, name: str) -> None:
    params = {"LIST": (b"\xff" * 17, 10)}.get(name, (b"x" * 16,))
    plan = _plan(db, getattr(workflow_admin, name), params)
    assert "jobs_workflow" in plan, plan
    # the listing's CTE rows are scanned; the jobs never are
    assert not re.search(r"\bSCAN (?!w\b|CONSTANT ROW\b)", plan), plan
