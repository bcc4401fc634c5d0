"""The reclaim sweep's statement (``expired_leases``) on PostgreSQL before and after migration
0008 (one index over the RESERVED jobs, ``(queue, lease_expires_at) WHERE state = 3``).

Builds two scratch schemas: "old" with migrations 0001-0007 (``jobs_leased
(lease_expires_at)`` and ``jobs_reserved (queue)``) running the statement as it was (one
walk of jobs_leased in expiry order), and "new" with every migration running today's
``expired_leases`` (a skip scan over the queues, a probe per queue, the oldest kept, then
locked by seq). Each holds ``--background`` READY jobs of one queue and as many COMPLETED
ones, then the leases of one case:

* ``Q x N expired``: Q queues of N RESERVED jobs each, every lease expired (a node died);
* ``Q x N live``: the same, no lease expired yet (the sweep's usual pass: nothing to do).

Statistics either taken before the RESERVED jobs were added ("stale": the planner thinks
there are none) or after ("fresh"); autovacuum off for ``jobs``. Each statement runs
``--rounds`` times as ``EXPLAIN (ANALYZE, BUFFERS)`` with ``--limit`` and ``jit = off`` (as
ReclaimOp runs it: queries.sql ``sweep_no_jit``) (the sweeper's
PASS_LIMIT) in a transaction rolled back (every round locks the same rows, none changes).
The two statements run alternately. Prints the execution time (ms, least and median) and
the shared buffers the plan touched (the most of any round), old and new.

``--sqlite`` also times SQLite's statement before and after migration 0010 on the same jobs
(CPU time of this process, no statistics: SQLite runs no ANALYZE).

    python benchmarks/postgres_reclaim_sweep.py [--rounds 7] [--limit 5000] [--background 20000]
        [--sqlite] [--dsn postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
import uuid_utils
from _harness import table

from sepp.storage._sql import migrations
from sepp.storage.postgres.sql import Q
from sepp.storage.sqlite.sql import Q as SQLITE_Q

NOW = 1_700_000_000_000_000
COLUMNS = ["id", "queue", "job_type", "state", "priority", "run_at", "enqueued_at", "max_attempts", "payload",
           "encoding"]
#: ``expired_leases`` as it was before migration 0008 (one walk of jobs_leased (lease_expires_at)).
OLD = """SELECT seq, queue, attempt, max_attempts, worker_id, started_at, lease_expires_at, cancel_requested, node, id,
    lease_id, job_type
FROM jobs WHERE state = 3 AND lease_expires_at <= $1
ORDER BY lease_expires_at, seq LIMIT $2
FOR UPDATE SKIP LOCKED"""
#: SQLite's ``expired_leases`` before migration 0010 (keyset after (?2, ?3), one walk of jobs_leased).
OLD_SQLITE = """SELECT seq, queue, attempt, max_attempts, worker_id, started_at, lease_expires_at, cancel_requested,
    node, id, lease_id, job_type
FROM jobs WHERE state = 3 AND lease_expires_at <= ?1 AND (lease_expires_at, seq) > (?2, ?3)
ORDER BY lease_expires_at, seq LIMIT ?4"""
CASES = [(100, 200, True), (1, 20_000, True), (100, 200, False), (1_000, 5, True)]


async def build(conn: asyncpg.Connection, schema: str, upto: int, queues: int, per: int, expired: bool,
                background: int, fresh: bool) -> None:
    """A schema ``schema`` migrated to version ``upto`` holding the case's jobs."""
    await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    await conn.execute(f"SET search_path = {schema}")
    for number, _name, sql in migrations("sepp.storage.postgres"):
        if number <= upto:
            await conn.execute(sql)
    await conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")

    async def add(n: int, queue: str, state: int) -> None:
        rows = [(uuid_utils.uuid7().bytes, queue, "t", state, 0, NOW, NOW, 3, b"{}", "") for _ in range(n)]
        await conn.copy_records_to_table("jobs", records=rows, columns=COLUMNS, schema_name=schema)

    await add(background, "bg", 4)
    await add(background, "bg", 2)
    if not fresh:
        await conn.execute("ANALYZE jobs")
    for i in range(queues):
        await add(per, f"queue-{i:04d}", 2)
    # Leased in batches of 256 as a Reserve leases them (one expiry per batch), 1 s apart.
    expiry = NOW - 3_600_000_000 if expired else NOW + 3_600_000_000
    await conn.execute(
        "UPDATE jobs SET state = 3, lease_id = '\\x00'::bytea, lease_expires_at = $1 + (seq / 256) * 1000000, "
        "worker_id = 'w', attempt = 1 WHERE queue <> 'bg'", expiry)
    if fresh:
        await conn.execute("ANALYZE jobs")
    await conn.execute("VACUUM jobs")  # the UPDATE's dead versions out of the way (a sweep rarely meets them)


async def once(conn: asyncpg.Connection, schema: str, sql: str, limit: int) -> tuple[float, int, int]:
    """(ms, shared buffers, rows) of one rolled-back run of ``sql`` in ``schema``."""
    tr = conn.transaction()
    await tr.start()
    try:
        await conn.execute(f"SET LOCAL search_path = {schema}")
        await conn.execute("SET LOCAL jit = off")  # as ReclaimOp runs it (queries.sql sweep_no_jit)
        plan = [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + sql, NOW, limit)]
    finally:
        await tr.rollback()
    ms = float(next(m[1] for line in plan if (m := re.search(r"Execution Time: ([\d.]+)", line))))
    top = next(line for line in plan if "Buffers:" in line)
    hit, read = re.search(r"hit=(\d+)", top), re.search(r"read=(\d+)", top)
    rows = int(re.search(r"actual time=[\d.]+\.\.[\d.]+ rows=(\d+)", plan[0])[1])  # type: ignore[index]
    return ms, (int(hit[1]) if hit else 0) + (int(read[1]) if read else 0), rows


def sqlite_case(folder: Path, upto: int, queues: int, per: int, expired: bool, background: int
                ) -> sqlite3.Connection:
    """A SQLite database migrated to ``upto`` holding the case's jobs (as ``build``)."""
    path = folder / f"sweep-{upto}.db"
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    for number, _name, sql in migrations("sepp.storage.sqlite"):
        if number <= upto:
            conn.executescript(f"BEGIN;\n{sql}\n;PRAGMA user_version={number};\nCOMMIT;")
    conn.execute("BEGIN")
    for queue, state, n in [("bg", 4, background), ("bg", 2, background),
                            *((f"queue-{i:04d}", 2, per) for i in range(queues))]:
        conn.executemany("INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, "
                         "payload, encoding) VALUES (?, ?, 't', ?, 0, ?, ?, 3, x'7b7d', '')",
                         [(uuid_utils.uuid7().bytes, queue, state, NOW, NOW) for _ in range(n)])
    expiry = NOW - 3_600_000_000 if expired else NOW + 3_600_000_000
    conn.execute("UPDATE jobs SET state = 3, lease_id = x'00', lease_expires_at = ? + (seq / 256) * 1000000, "
                 "worker_id = 'w', attempt = 1 WHERE queue <> 'bg'", (expiry,))
    conn.execute("COMMIT")
    return conn


def sqlite_rows(args: argparse.Namespace) -> list[list[str]]:
    """The SQLite table: CPU ms of one run of each statement (least / median of
    ``--rounds``, alternated), rows."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for queues, per, expired in CASES:
            sides = [(sqlite_case(Path(tmp), upto, queues, per, expired, args.background), sql)
                     for upto, sql in ((9, OLD_SQLITE), (10_000, SQLITE_Q["expired_leases"]))]
            times: list[list[float]] = [[], []]
            counts = set()
            for _ in range(args.rounds):
                for i, (conn, sql) in enumerate(sides):
                    t0 = time.process_time()
                    counts.add(len(conn.execute(sql, (NOW, -(2**63), 0, args.limit)).fetchall()))
                    times[i].append((time.process_time() - t0) * 1e3)
            for conn, _sql in sides:
                conn.close()
            assert len(counts) == 1, counts
            out.append([f"{queues:,} x {per:,} {'expired' if expired else 'live'}", f"{counts.pop():,}",
                        *(f"{min(t):.2f} / {statistics.median(t):.2f}" for t in times)])
    return out


async def main(args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(args.dsn)
    schema = f"bench_sweep_{os.getpid()}"
    out: list[list[str]] = []
    try:
        for queues, per, expired in CASES:
            for fresh in (False, True):
                sides = ((schema + "_old", 7, OLD), (schema + "_new", 10_000, Q["expired_leases"]))
                for name, upto, _sql in sides:
                    await build(conn, name, upto, queues, per, expired, args.background, fresh)
                got: list[list[tuple[float, int, int]]] = [[], []]
                for _ in range(args.rounds):  # alternated: the machine's speed drifts
                    for i, (name, _upto, sql) in enumerate(sides):
                        got[i].append(await once(conn, name, sql, args.limit))
                t0, t1 = ([x[0] for x in runs] for runs in got)
                b0, b1 = (max(x[1] for x in runs) for runs in got)
                r0, r1 = (max(x[2] for x in runs) for runs in got)
                assert r0 == r1, (r0, r1)
                out.append([f"{queues:,} x {per:,} {'expired' if expired else 'live'}", "fresh" if fresh else "stale",
                            f"{r1:,}", f"{min(t0):.2f} / {statistics.median(t0):.2f}",
                            f"{min(t1):.2f} / {statistics.median(t1):.2f}", f"{b0:,}", f"{b1:,}"])
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema}_old CASCADE; DROP SCHEMA IF EXISTS {schema}_new CASCADE")
        await conn.close()
    print(f"\nexpired_leases, LIMIT {args.limit:,}, {args.background:,} READY + {args.background:,} COMPLETED jobs "
          f"besides; median of {args.rounds}")
    print(table(["RESERVED jobs", "statistics", "rows", "old ms (min / median)", "new ms (min / median)",
                 "old buffers", "new buffers"], out))
    if args.sqlite:
        print(f"\nSQLite expired_leases, LIMIT {args.limit:,}, same jobs; CPU ms of this process, "
              f"least / median of {args.rounds}")
        print(table(["RESERVED jobs", "rows", "old CPU ms", "new CPU ms"], sqlite_rows(args)))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--limit", type=int, default=5_000)
    ap.add_argument("--background", type=int, default=20_000)
    ap.add_argument("--sqlite", action="store_true", help="also time SQLite's statement, old and new")
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    asyncio.run(main(ap.parse_args()))
