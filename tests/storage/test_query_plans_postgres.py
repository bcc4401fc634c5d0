"""PostgreSQL statements that change jobs found by id or seq find them by that key, even when
the planner's statistics are stale (many workers, deep prefetch, bursts of
scheduled jobs, large dead-letter queues).

The partial indexes (``jobs_ready``: READY, ``jobs_scheduled``: SCHEDULED, ``jobs_leased``:
RESERVED, and ``jobs_reserved`` too before migration 0008, ``jobs_finished``: state ≥ 4)
look almost free to a planner whose last ANALYZE saw no row in their state, and a statement
that says ``state = 3`` (or ``IN (5, 6)``) lets it use them: then changing one job, or each
row of a chunk, reads every job of that state. Measured
(``benchmarks/postgres_many_leases.py``, 20,480 jobs leased): one ack 4 ms instead of 0.16,
one nack 5 ms instead of 0.13; a promotion chunk of 1,000 of 20,000 due jobs 2.6 s. So the
guard on the row changed is written ``state::integer = N`` — the same test, which no index
predicate matches — while the statement that *selects* the rows (the
CTE) keeps ``state = N`` and its partial index. This test pins the plans after statistics
taken while the table held other states only (autovacuum off for the table), and the
chunked statements again after a fresh ANALYZE: a chunk joined as ``j.seq = chunk.seq``
was then a hash join over the whole table, so the rows a chunk chose are found as
``seq = ANY(ARRAY(SELECT seq FROM chunk))``. The admin search (``search_match``,
``search_range``) finds its rows by seq and tests their state the same way.

The readers of the RESERVED jobs (the reclaim sweep, flow control's count and extras, the
admin counts, pages and purges) are pinned to ``jobs_leased`` — ``(queue, lease_expires_at)
WHERE state = 3`` since migration 0008 — with stale and with fresh statistics.
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
from sepp.storage.postgres.ids import make_id
from sepp.storage.postgres.sql import A, Q
from storage.conformance_kit import NOW

#: The tests that read a plan from the database (the others read the SQL files alone).
NEEDS_POSTGRES = pytest.mark.postgres_only(reason="PostgreSQL's query plans")

#: The statements of queries.sql and admin.sql, by name.
SQL = {**Q, **A}
LEASE = b"L" * 16
COLUMNS = ["id", "queue", "job_type", "state", "priority", "run_at", "enqueued_at", "max_attempts", "payload",
           "encoding"]
#: The partial indexes of ``jobs`` (migrations 0001 and 0008).
PARTIAL = ("jobs_ready", "jobs_scheduled", "jobs_leased", "jobs_finished")

#: Statement name → parameters: "SEQ:<state>" / "ID:<state>" are a job of that state,
#: "SEQS:2" 256 READY seqs, "IDS:3" 256 RESERVED ids.
STATEMENTS: dict[str, tuple[Any, ...]] = {
    "complete_one": (NOW, NOW + 1, "SEQ:3", LEASE, b"r", "text/plain"),
    "settle_update": (2, NOW, 1, None, None, None, "{}", "SEQ:3", LEASE),
    "reclaim_ready": (2, "{}", "SEQ:3", LEASE),
    "bury_leased": (NOW, "damaged", "ID:3", LEASE),
    "ack_many": (NOW, 1_000_000, "IDS:3", [LEASE] * 256),
    "ack_many_results": (NOW, 1_000_000, "IDS:3", [LEASE] * 256, [b"r", None] * 128, ["text/plain", None] * 128),
    "request_cancel": ("SEQ:3",),
    "lease_seqs": ("SEQS:2", LEASE, NOW + 60_000_000, "w", NOW, "n"),
    "lease_within": ("q", 256, LEASE, NOW + 60_000_000, "w", NOW, "n", 1_000_000, True),
    "lease_seqs_spend": ("SEQS:2", LEASE, NOW + 60_000_000, "w", NOW, "n", "q", 1.0, NOW),
    "promote_due": (NOW + 10_000_000, 1_000),
    "promote_due_locking": (NOW + 10_000_000, 1_000, ["q"]),
    "cancel_now": (NOW, NOW + 1, "cancelled", "SEQ:2"),
    "requeue_one": (2, 0, NOW, "SEQ:5"),
    # A dependent cancelled because of a failed dependency, revived by its redrive.
    "revive_one": ("SEQ:5",),
    # A ticked row's delete, only while the job is in the state the page listed.
    "delete_one_in_state": ("ID:5", 5),
    "requeue_dead_queue": (2, 0, NOW, "q", 0, NOW + 1, None, None, 1_000),
    "requeue_dead_all": (2, 0, NOW, 0, NOW + 1, None, None, 1_000),
    "purge_scheduled": ("q", 1_000),
    "purge_ready": ("q", 1_000),
    "purge_reserved": ("q", 1_000),
    "purge_finished": ("q", 1_000, 5),
    "prune_jobs": (NOW, 1_000),
    # The reclaim sweep locks the oldest expired leases its per-queue probes chose by seq.
    "expired_leases": (NOW + 120_000_000, 1_000),
    # Reads that find jobs by seq and test their state (the admin search).
    "search_match": ("SEQS:3", "q", 3, None, None, None, None, None, [], []),
    "search_range": ("SEQ:3", None, 5, None, None, None, None, None, [], [], "SEQ:3+1000"),
    # The jobs an enqueue through SQL stored, read by their blocks of seqs (live events).
    "jobs_in_seq_blocks": ("SEQS:2", [4] * 256),
}
#: Those that change the rows a CTE selected (the CTE may use a partial index; the row
#: changed must be found by seq).
CHUNKED = {"expired_leases", "lease_within", "promote_due", "promote_due_locking",
           "requeue_dead_queue", "requeue_dead_all", "purge_scheduled", "purge_ready", "purge_reserved",
           "purge_finished", "prune_jobs"}


async def _migrated(tmp_path: Path) -> asyncpg.Connection:
    """A connection to a fresh schema the PostgreSQL store created and migrated, on its
    search path, with autovacuum off for ``jobs`` (its statistics change only by ANALYZE)."""
    settings = store_settings("postgres")
    store = open_store(StoreSettings(data_dir=tmp_path, **settings), FakeClock(NOW))
    await store.open()
    await store.close()
    connection = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": settings["postgres"].schema})
    try:
        await connection.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        # The fixtures COPY rows with the sequence's default seq and pick jobs by seq
        # arithmetic: consecutive seqs, as a node's blocks give them (migration 0010 made
        # the increment a block of 1,024); the plans do not depend on it.
        await connection.execute("ALTER SEQUENCE jobs_seq_seq INCREMENT BY 1")
    except BaseException:
        await connection.close()
        raise
    return connection


@pytest.fixture
async def conn(tmp_path: Path) -> AsyncIterator[asyncpg.Connection]:
    """A migrated schema of its own, analyzed while it held 2,000 COMPLETED jobs only, then
    given 20,480 READY, 20,480 RESERVED, 20,000 due SCHEDULED and 20,000 DEAD_LETTERED jobs
    (the statistics still say there are none); a connection with it on the search path."""
    connection = await _migrated(tmp_path)
    try:

        async def add(n: int, state: int, run_at: int = NOW) -> None:
            rows = [(uuid_utils.uuid7().bytes, "q", "t", state, 0, run_at, NOW, 3, b"{}", "application/json")
                    for _ in range(n)]
            await connection.copy_records_to_table("jobs", records=rows, columns=COLUMNS)

        await add(2_000, 4)
        # 1 in 100 past retention: the statistics promise a prune chunk of ~1% of the table.
        await connection.execute(
            "UPDATE jobs SET purge_at = CASE WHEN seq % 100 = 0 THEN $1::bigint ELSE $2::bigint END",
            NOW - 1, NOW + 10**12)
        await connection.execute("ANALYZE jobs")
        await add(40_960, 2)
        await add(20_000, 1, NOW + 1_000_000)
        await add(20_000, 5)
        await connection.execute(
            "UPDATE jobs SET finished_at = $1, reason = 'attempts_exhausted' WHERE state >= 4", NOW - 1)
        await connection.execute(
            "UPDATE jobs SET state = 3, lease_id = $1, lease_expires_at = $2, worker_id = 'w', attempt = 1 "
            "WHERE seq IN (SELECT seq FROM jobs WHERE state = 2 ORDER BY seq LIMIT 20480)", LEASE, NOW + 60_000_000)
        yield connection
    finally:
        await connection.close()


async def _params(conn: asyncpg.Connection, name: str) -> list[Any]:
    out: list[Any] = []
    for p in STATEMENTS[name]:
        if isinstance(p, str) and (m := re.fullmatch(r"(SEQ|ID|SEQS|IDS):(\d)(?:\+(\d+))?", p)):
            kind, state = m[1], m[2]
            column = "seq" if kind.startswith("SEQ") else "id"
            picked = [r[0] for r in await conn.fetch(
                f"SELECT {column} FROM jobs WHERE state = $1 ORDER BY seq LIMIT 256 OFFSET 77", int(state))]
            out.append(picked if kind.endswith("S") else picked[0] + int(m[3]) if m[3] else picked[0])
        else:
            out.append(p)
    return out


async def _wrong_plans(conn: asyncpg.Connection, names: list[str]) -> dict[str, str]:
    """The plans of ``names`` (EXPLAIN without ANALYZE: nothing changed) that do not find the
    jobs by jobs_pkey (a statement that finds a job by id probes jobs_id_foreign first,
    then jobs_pkey at the seq the id carries: migration 0010), or (outside ``CHUNKED``) read
    a partial index."""
    wrong = {}
    for name in names:
        plan = " | ".join(r[0].strip() for r in await conn.fetch("EXPLAIN " + SQL[name], *await _params(conn, name)))
        by_key = "jobs_pkey" in plan
        if not by_key or (name not in CHUNKED and any(index in plan for index in PARTIAL)):
            wrong[name] = plan
    return wrong


@NEEDS_POSTGRES
async def test_jobs_changed_by_id_or_seq_are_found_by_that_key(conn: asyncpg.Connection) -> None:
    assert await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 3") == 20_480
    wrong = await _wrong_plans(conn, sorted(STATEMENTS))
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())


@NEEDS_POSTGRES
async def test_chunks_are_found_by_seq_with_fresh_statistics(conn: asyncpg.Connection) -> None:
    """With statistics that know the chunk is 1,000 rows of ~80,000, a chunk joined to
    ``jobs`` as ``j.seq = chunk.seq`` was a hash join over a sequential scan of the whole
    table (promotion chunk 17 ms instead of 8); ``seq = ANY(ARRAY(SELECT seq FROM chunk))``
    is always a primary-key lookup."""
    await conn.execute("ANALYZE jobs")
    wrong = await _wrong_plans(conn, sorted(CHUNKED))
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())


@NEEDS_POSTGRES
@pytest.mark.parametrize("ids", ["native", "foreign"])
async def test_acks_find_their_jobs_by_key_with_statistics_of_ready_jobs_only(tmp_path: Path, ids: str) -> None:
    """Statistics taken right after a bulk enqueue (every job READY, none RESERVED) made the
    planner join ``jobs`` to the acked ids as a sequential scan per id (``ack_many``: 13 ms
    a batch of 256 at 20,000 jobs instead of 2.6, benchmarks/postgres_drain.py); each id is
    probed through jobs_id_foreign and then jobs_pkey at the seq it carries, and its row
    updated through jobs_pkey — for ids that carry their seq (``native``: a node made them)
    and ids that do not (``foreign``: found in jobs_id_foreign)."""
    conn = await _migrated(tmp_path)
    try:
        if ids == "native":
            seqs = [r[0] for r in await conn.fetch(Q["take_seqs"], 20_000)]
            native = [(make_id(seq, NOW * 1000).to_bytes(16, "big"), "q", "t", 2, 0, NOW, NOW, 3, b"{}",
                       "application/json", seq) for seq in seqs]
            await conn.copy_records_to_table("jobs", records=native, columns=[*COLUMNS, "seq"])
            assert await conn.fetchval("SELECT count(*) FROM jobs WHERE job_id_foreign(id, seq)") == 0
        else:
            rows = [(uuid_utils.uuid7().bytes, "q", "t", 2, 0, NOW, NOW, 3, b"{}", "application/json")
                    for _ in range(20_000)]
            await conn.copy_records_to_table("jobs", records=rows, columns=COLUMNS)
            assert await conn.fetchval("SELECT count(*) FROM jobs WHERE job_id_foreign(id, seq)") == 20_000
        await conn.execute("ANALYZE jobs")
        leased = await conn.fetch(SQL["lease_ready"], "q", 256, LEASE, NOW + 60_000_000, "w", NOW, "n")
        plan = [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, TIMING OFF) " + SQL["ack_many"], NOW, 1_000_000,
                                              [r[0] for r in leased], [LEASE] * len(leased))]
        text = " | ".join(line.strip() for line in plan)
        assert "Seq Scan" not in text and "jobs_id_foreign" in text and "jobs_pkey" in text, text
        assert re.search(r"Update on jobs j .*actual rows=256 ", plan[0]), plan[0]
    finally:
        await conn.close()


@NEEDS_POSTGRES
async def test_next_due_reads_one_scheduled_job(conn: asyncpg.Connection) -> None:
    """``next_due`` (the sweeper, after every promotion) reads the first entry of
    jobs_scheduled: as ``min(run_at)`` a planner that thought no job SCHEDULED aggregated
    over all 20,000 of them (3.3 ms instead of 0.01)."""
    plan = [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, TIMING OFF) " + SQL["next_due"])]
    scans = [int(m[1]) for line in plan if "Scan" in line and (m := re.search(r"actual rows=(\d+)", line))]
    assert scans == [1], "\n".join(plan)


def test_every_statement_that_changes_jobs_by_key_is_pinned() -> None:
    """A statement of queries.sql or admin.sql with a WHERE that finds jobs by seq or id and
    guards on their state is in ``STATEMENTS``, and writes that guard ``state::integer``."""
    keyed = re.compile(r"WHERE[^\n]*\b(seq|id)\s*(=|IN)[^\n]*\bstate(::integer)?\s*(=|IN)")
    plain = re.compile(r"WHERE[^\n]*\b(seq|id)\s*(=|IN)[^\n]*\bstate\s*(=|IN)")
    found = {name for name, sql in SQL.items() if keyed.search(sql)}
    assert found <= set(STATEMENTS), found - set(STATEMENTS)
    assert not [name for name, sql in SQL.items() if plain.search(sql)]


# ---------------------------------------------------------------------- readers of jobs_leased
# Migration 0008 made jobs_leased (queue, lease_expires_at) WHERE state = 3 the one index of
# the RESERVED jobs (it replaced jobs_leased (lease_expires_at) and jobs_reserved (queue)).

#: Statements that read RESERVED jobs → parameters. Each must read ``jobs`` through
#: jobs_leased, never by a sequential scan (a reclaim pass, a limited Reserve's count or an
#: admin page must not read the whole table; with fresh statistics a count of 10,240 rows
#: may be a bitmap scan of jobs_leased).
RESERVED_READERS: dict[str, tuple[Any, ...]] = {
    "expired_leases": (NOW, 5_000),
    # A limited Reserve (max_in_flight 10,000) that counts exactly (no bound row yet).
    "flow_ready": ("q", 256, 10_000, True, False, NOW, 10_000, False),
    "reserved_extras_in": ("q",),
    "count_reserved_all": (),
    "count_reserved_by_worker": (),
    "count_queue": ("q",),
    "list_reserved": (0, "q", None, 100),
    "queue_has_jobs": ("r-0001",),
    "flow_reserved_extras": ("q",),
    "purge_reserved": ("r-0001", 1_000),
}
#: Pages in enqueue order: the planner may walk jobs_pkey from the page's position instead
#: (fresh statistics: it expects a RESERVED job every few rows), never the whole table.
PKEY_OK = {"list_reserved"}
#: Those that keep jobs_leased even with statistics of a burst ("burst": the planner thinks 80%
#: of the table RESERVED in queue "q"). The others may then read the table sequentially — a
#: per-queue count or extras read of "q" as well as the GROUP BY counts — as they did through
#: jobs_reserved before migration 0008 (a planner's fair choice for 80% of the rows; flow
#: control counts at most about once a second per limited queue: migration 0007's bound).
BURST_OK = {"expired_leases", "list_reserved", "queue_has_jobs", "purge_reserved"}
#: The RESERVED jobs of the fixture: queue "q" and 40 queues r-0000 … r-0039.
BIG, SMALL, QUEUES = 10_240, 256, 40


@pytest.fixture(params=["stale", "fresh", "burst"])
async def leased(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[asyncpg.Connection]:
    """A migrated schema holding 2,000 COMPLETED jobs, 40,960 READY ones of queue "q" and
    20,480 RESERVED ones — 10,240 of "q", 256 each of 40 other queues, half of every queue's
    leases expired at NOW (the even seqs; 256 consecutive seqs share an expiry) — with
    statistics taken while it held the COMPLETED jobs only ("stale": the planner thinks no job
    RESERVED), after everything ("fresh"), or while every job but the COMPLETED ones was
    RESERVED ("burst": the planner thinks queue "q" has 51,200 RESERVED jobs, 80% of the
    table)."""
    connection = await _migrated(tmp_path)
    try:
        async def add(n: int, queue: str, state: int) -> None:
            rows = [(uuid_utils.uuid7().bytes, queue, "t", state, 0, NOW, NOW, 3, b"{}", "application/json")
                    for _ in range(n)]
            await connection.copy_records_to_table("jobs", records=rows, columns=COLUMNS)

        await add(2_000, "done", 4)
        if request.param == "stale":
            await connection.execute("ANALYZE jobs")
        await add(40_960 + BIG, "q", 2)
        for i in range(QUEUES):
            await add(SMALL, f"r-{i:04d}", 2)
        if request.param == "burst":
            await connection.execute("UPDATE jobs SET state = 3, lease_expires_at = $1 WHERE state = 2", NOW)
            await connection.execute("ANALYZE jobs")
            await connection.execute("UPDATE jobs SET state = 2, lease_expires_at = NULL WHERE state = 3")
        await connection.execute(
            "UPDATE jobs SET state = 3, lease_id = $1, worker_id = 'w', attempt = 1, "
            "lease_expires_at = CASE WHEN seq % 2 = 0 THEN $2 - (seq / 256) * 1000 "
            "ELSE $2 + 1 + (seq / 256) * 1000 END "
            "WHERE seq IN (SELECT seq FROM jobs WHERE state = 2 AND (queue <> 'q' OR seq > 2000 + 40960))",
            LEASE, NOW)
        if request.param == "fresh":
            await connection.execute("ANALYZE jobs")
        yield connection
    finally:
        await connection.close()


async def _plan(conn: asyncpg.Connection, sql: str, params: tuple[Any, ...]) -> list[str]:
    """The plan of ``sql`` run (EXPLAIN ANALYZE, TIMING OFF) in a transaction rolled back."""
    tr = conn.transaction()
    await tr.start()
    try:
        return [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, TIMING OFF) " + sql, *params)]
    finally:
        await tr.rollback()


@NEEDS_POSTGRES
async def test_readers_of_reserved_jobs_use_jobs_leased(leased: asyncpg.Connection,
                                                         request: pytest.FixtureRequest) -> None:
    assert await leased.fetchval("SELECT count(DISTINCT queue) FROM jobs WHERE state = 3") == QUEUES + 1
    burst = request.node.callspec.params["leased"] == "burst"
    wrong = {}
    for name, params in RESERVED_READERS.items():
        if burst and name not in BURST_OK:
            continue
        plan = [line.strip() for line in await _plan(leased, SQL[name], params)]
        text = " | ".join(plan)
        # A sequential scan for RESERVED jobs (count_queue's READY count may be one: most of
        # the table is READY and the statistics know it).
        scans = [" ".join(plan[i:i + 2]) for i, line in enumerate(plan) if "Seq Scan on jobs" in line]
        if any("state = 3" in scan for scan in scans) or not ("jobs_leased" in text or (
                name in PKEY_OK and "Index Scan using jobs_pkey" in text)):
            wrong[name] = text
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())


@NEEDS_POSTGRES
async def test_the_reclaim_sweep_probes_each_queue_through_jobs_leased(leased: asyncpg.Connection) -> None:
    """``expired_leases`` finds the queues by a skip scan of jobs_leased (one row per queue
    holding RESERVED jobs, and the end), probes each for its expired leases by (queue,
    expiry), and locks the oldest by seq: every expired lease of every queue, in order."""
    expired = await leased.fetch("SELECT seq FROM jobs WHERE state = 3 AND lease_expires_at <= $1 "
                                 "ORDER BY lease_expires_at, seq", NOW)
    assert len(expired) == (BIG + QUEUES * SMALL) // 2
    plan = await _plan(leased, SQL["expired_leases"], (NOW, 5_000))
    text = " | ".join(line.strip() for line in plan)
    assert re.search(r"Index Cond: \(\(queue = qs(_\d+)?\.q\) AND \(lease_expires_at <= [^)]+\)\)", text), text
    assert "Seq Scan on jobs" not in text and "jobs_pkey" in text, text
    probes = [line for line in plan if re.search(r"Index (Only )?Scan using jobs_leased on jobs jobs_\d", line)
              and "loops=" in line]
    assert probes and all(int(re.search(r"loops=(\d+)", line)[1]) <= QUEUES + 2 for line in probes), plan  # type: ignore[index]
    got = await leased.fetch(SQL["expired_leases"], NOW, 5_000)
    assert [r[0] for r in got] == [r[0] for r in expired[:5_000]]
    got = await leased.fetch(SQL["expired_leases"], NOW, 50_000)
    assert [r[0] for r in got] == [r[0] for r in expired]
