"""Settling on PostgreSQL while many jobs are leased (issue 10: many workers, deep prefetch).

Builds a scratch schema with ``--jobs`` READY jobs, ANALYZEs it (so the planner's statistics
say no job is RESERVED, as after a quiet spell), leases ``--leased`` of them in batches of
256, then times, per statement, the settle of leased jobs with the guard as sepp writes it
(``state::integer = 3``: looked up by id or seq) and as it was written before
(``state = 3``: the planner may read every RESERVED job through a partial index instead):

* ``ack_many``: one batch of 256 acks (the Worker's usual settle);
* ``complete_one``: one ack by seq (a lone ``Ack``, or an ack the batch refused);
* ``settle_update``: one nack (retry) by seq.

Prints a Markdown table of milliseconds per statement (median of ``--rounds``) and the plan's
index. Needs the machine's PostgreSQL (``--dsn``; the schema is dropped at the end).

    python benchmarks/postgres_many_leases.py [--jobs 24576] [--leased 20480] [--rounds 20]
        [--dsn postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
from typing import Any

import asyncpg
import uuid_utils
from _harness import table

from sepp.storage._sql import migrations
from sepp.storage.postgres.sql import Q

NOW = 1_700_000_000_000_000
SCHEMA = f"bench_leases_{os.getpid()}"
COLUMNS = ["id", "queue", "job_type", "state", "priority", "run_at", "enqueued_at", "max_attempts", "payload",
           "encoding"]


def before(sql: str) -> str:
    """The statement as it was written before (``state = 3``)."""
    return sql.replace("state::integer = 3", "state = 3")


def index_of(plan: list[str]) -> str:
    """The index the plan reads ``jobs`` through."""
    for line in plan:
        m = re.search(r"Index Scan using (\w+) on jobs", line)
        if m:
            return m.group(1)
    return "?"


async def main(args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(args.dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}")
        await conn.execute(f"SET search_path = {SCHEMA}")
        for _number, _name, sql in migrations("sepp.storage.postgres"):
            await conn.execute(sql)
        await conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        rows = [(uuid_utils.uuid7().bytes, "q", "t", 2, 0, NOW, NOW, 3, b'{"i": 1}', "application/json")
                for _ in range(args.jobs)]
        await conn.copy_records_to_table("jobs", records=rows, columns=COLUMNS)
        await conn.execute("ANALYZE jobs")
        leases: list[tuple[bytes, list[tuple[bytes, int]]]] = []
        for _ in range(args.leased // 256):
            lid = os.urandom(16)
            got = await conn.fetch(Q["lease_ready"], "q", 256, lid, NOW + 3_600_000_000, "w", NOW, "n")
            leases.append((lid, [(r["id"], r["seq"]) for r in got]))
        reserved = await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 3")
        out: list[list[str]] = []
        for name in ("ack_many", "complete_one", "settle_update"):
            cells = [name]
            for sql in (before(Q[name]), Q[name]):
                times: list[float] = []
                plan: list[str] = []
                for k in range(args.rounds):
                    lid, jobs = leases[k % len(leases)]
                    params: tuple[Any, ...]
                    if name == "ack_many":
                        params = (NOW + 1, 1_000_000, [j for j, _ in jobs], [lid] * len(jobs))
                    elif name == "complete_one":
                        params = (NOW + 1, NOW + 2, jobs[k][1], lid)
                    else:
                        params = (2, NOW + 1_000_000, 1, None, None, None, "{}", jobs[k][1], lid)
                    if not plan:
                        plan = [r[0] for r in await conn.fetch("EXPLAIN " + sql, *params)]
                    tx = conn.transaction()
                    await tx.start()
                    t0 = time.perf_counter()
                    await conn.execute(sql, *params)
                    times.append((time.perf_counter() - t0) * 1000)
                    await tx.rollback()  # every round settles the same leased jobs afresh
                cells += [f"{statistics.median(times):.2f}", index_of(plan)]
            out.append(cells)
        print(f"\n{args.jobs} jobs, {reserved} leased, statistics taken before leasing; median of {args.rounds} rounds")
        print(table(["statement", "state = 3: ms", "its index", "state::integer = 3: ms", "its index"], out))
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await conn.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=24_576)
    ap.add_argument("--leased", type=int, default=20_480)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    asyncio.run(main(ap.parse_args()))
