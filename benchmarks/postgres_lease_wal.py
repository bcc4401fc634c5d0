"""The WAL one Reserve of 256 jobs (``lease_within``) and their acks (``ack_many``) write on
PostgreSQL, before and after migration 0008 (one index over the RESERVED jobs instead of two).

``pg_stat_wal`` counts the whole cluster (on a shared machine other sessions write too);
``EXPLAIN (ANALYZE, WAL)`` counts one statement. For each schema — "old" migrated to 0007
(``jobs_leased (lease_expires_at)`` and ``jobs_reserved (queue)``), "new" to the latest —
holding ``--ready`` READY jobs: ``--rounds`` times, lease 256 and ack them, each under
``EXPLAIN (ANALYZE, WAL)``, committed (the next round takes the next 256). Prints the median
WAL records and bytes per job of each statement.

    python benchmarks/postgres_lease_wal.py [--rounds 9] [--ready 20000]
        [--dsn postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics

import asyncpg
import uuid_utils
from _harness import table

from sepp.storage._sql import migrations
from sepp.storage.postgres.sql import Q

NOW = 1_700_000_000_000_000
COLUMNS = ["id", "queue", "job_type", "state", "priority", "run_at", "enqueued_at", "max_attempts", "payload",
           "encoding"]


def wal(plan: list[str]) -> tuple[int, int]:
    """(records, bytes) of the plan's top node (``WAL: records=… bytes=…``)."""
    line = next(x for x in plan if "WAL:" in x)
    records, size = re.search(r"records=(\d+)", line), re.search(r"bytes=(\d+)", line)
    return (int(records[1]) if records else 0), (int(size[1]) if size else 0)


async def run(conn: asyncpg.Connection, schema: str, upto: int, rounds: int, ready: int) -> list[float]:
    """Median (lease records, lease bytes, ack records, ack bytes) per job in ``schema``."""
    await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path = {schema}")
    for number, _name, sql in migrations("sepp.storage.postgres"):
        if number <= upto:
            await conn.execute(sql)
    await conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
    rows = [(uuid_utils.uuid7().bytes, "q", "t", 2, 0, NOW, NOW, 3, b'{"i": 1}', "") for _ in range(ready)]
    await conn.copy_records_to_table("jobs", records=rows, columns=COLUMNS, schema_name=schema)
    await conn.execute("VACUUM ANALYZE jobs")
    figures: list[tuple[float, ...]] = []
    for _ in range(rounds):
        lid = os.urandom(16)
        async with conn.transaction():
            plan = [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, WAL) " + Q["lease_within"], "q", 256, lid,
                                                   NOW + 60_000_000, "w", NOW, "n", 1 << 40, True)]
        lease = wal(plan)
        ids = [r[0] for r in await conn.fetch("SELECT id FROM jobs WHERE lease_id = $1 ORDER BY id", lid)]
        async with conn.transaction():
            plan = [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, WAL) " + Q["ack_many"], NOW + 1, 1_000_000,
                                                   ids, [lid] * len(ids))]
        ack = wal(plan)
        figures.append((lease[0] / len(ids), lease[1] / len(ids), ack[0] / len(ids), ack[1] / len(ids)))
    return [statistics.median(f[i] for f in figures) for i in range(4)]


async def main(args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(args.dsn)
    schema = f"bench_wal_{os.getpid()}"
    out = []
    try:
        for label, upto in (("old (0007: jobs_leased + jobs_reserved)", 7), ("new (0008: one jobs_leased)", 10_000)):
            got = await run(conn, schema, upto, args.rounds, args.ready)
            out.append([label, *(f"{x:.2f}" if i % 2 == 0 else f"{x:.0f}" for i, x in enumerate(got))])
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()
    print(f"\nWAL per job of one lease_within (256 jobs) and one ack_many (256 acks); median of {args.rounds}")
    print(table(["schema", "lease records/job", "lease bytes/job", "ack records/job", "ack bytes/job"], out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--ready", type=int, default=20_000)
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    asyncio.run(main(ap.parse_args()))
