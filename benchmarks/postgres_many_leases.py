"""PostgreSQL statements on jobs found by id or seq, with stale statistics (issue 10: many
workers, deep prefetch, bursts of scheduled jobs).

Builds a scratch schema holding 2,000 COMPLETED jobs and ANALYZEs it (the planner's
statistics then say there is no READY, RESERVED or SCHEDULED job, as after a quiet spell),
then adds ``--ready`` READY jobs, leases ``--leased`` of them in batches of 256 and adds
``--due`` SCHEDULED jobs that are due. Times each statement with the state guard on the rows
it changes as sepp writes it (``state::integer = N``: found by their key) and with only that
guard put back to ``state = N`` (the planner may then read every job of that state through a
partial index instead). The chunk statements (``promote_due``) are otherwise today's text,
``seq = ANY(ARRAY(SELECT seq FROM chunk))``; the 2 s figure of docs/benchmarks.md was taken
with the older ``FROM chunk WHERE j.seq = chunk.seq`` join (commit ba2f629):

* ``ack_many``: one batch of 256 acks (the Worker's usual settle);
* ``complete_one``: one ack by seq (a lone ``Ack``, or an ack the batch refused);
* ``settle_update``: one nack (retry) by seq;
* ``lease_seqs``: one Reserve of 256 READY jobs (the byte-budgeted lease);
* ``promote_due``: one promotion chunk of 1,000 due jobs (every Reserve and the sweep).

Each statement runs in a transaction that is rolled back (every round sees the same rows).
Prints a Markdown table of milliseconds per statement (median of ``--rounds``; 3 for
``promote_due`` written the old way) and the index its plan reads ``jobs`` through. Needs the
machine's PostgreSQL (``--dsn``; the schema is dropped at the end).

    python benchmarks/postgres_many_leases.py [--ready 40960] [--leased 20480] [--due 20000]
        [--rounds 20] [--dsn postgresql://postgres@127.0.0.1:5432/test]
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
    """The statement as it was written before (``state = N``)."""
    return sql.replace("state::integer", "state")


def index_of(plan: list[str]) -> str:
    """The index the plan finds the changed rows of ``jobs`` through (the last index scan of
    the plan: a CTE's scan comes first)."""
    found = [m.group(1) for line in plan for m in [re.search(r"Index Scan using (\w+) on jobs", line)] if m]
    return found[-1] if found else "?"


async def add(conn: asyncpg.Connection, n: int, state: int, run_at: int = NOW) -> None:
    """``n`` jobs of queue ``q`` in ``state``."""
    rows = [(uuid_utils.uuid7().bytes, "q", "t", state, 0, run_at, NOW, 3, b'{"i": 1}', "application/json")
            for _ in range(n)]
    await conn.copy_records_to_table("jobs", records=rows, columns=COLUMNS)


async def main(args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(args.dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}")
        await conn.execute(f"SET search_path = {SCHEMA}")
        for _number, _name, sql in migrations("sepp.storage.postgres"):
            await conn.execute(sql)
        await conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        await add(conn, 2_000, 4)
        await conn.execute("ANALYZE jobs")
        await add(conn, args.ready, 2)
        leases: list[tuple[bytes, list[tuple[bytes, int]]]] = []
        for _ in range(args.leased // 256):
            lid = os.urandom(16)
            got = await conn.fetch(before(Q["lease_ready"]), "q", 256, lid, NOW + 3_600_000_000, "w", NOW, "n")
            leases.append((lid, [(r["id"], r["seq"]) for r in got]))
        await add(conn, args.due, 1, NOW - 1)
        ready = [r[0] for r in await conn.fetch("SELECT seq FROM jobs WHERE state = 2 ORDER BY seq LIMIT 256")]
        counts = dict(await conn.fetch("SELECT state, count(*) FROM jobs GROUP BY state"))
        out: list[list[str]] = []
        for name in ("ack_many", "complete_one", "settle_update", "lease_seqs", "promote_due"):
            cells = [name]
            for sql in (before(Q[name]), Q[name]):
                rounds = 3 if name == "promote_due" and sql != Q[name] else args.rounds
                times: list[float] = []
                plan: list[str] = []
                for k in range(rounds):
                    lid, jobs = leases[k % len(leases)]
                    params: tuple[Any, ...]
                    if name == "ack_many":
                        params = (NOW + 1, 1_000_000, [j for j, _ in jobs], [lid] * len(jobs))
                    elif name == "complete_one":
                        params = (NOW + 1, NOW + 2, jobs[k][1], lid)
                    elif name == "settle_update":
                        params = (2, NOW + 1_000_000, 1, None, None, None, "{}", jobs[k][1], lid)
                    elif name == "lease_seqs":
                        params = (ready, os.urandom(16), NOW + 3_600_000_000, "w", NOW, "n")
                    else:
                        params = (NOW, 1_000)
                    if not plan:
                        plan = [r[0] for r in await conn.fetch("EXPLAIN " + sql, *params)]
                    tx = conn.transaction()
                    await tx.start()
                    t0 = time.perf_counter()
                    await conn.execute(sql, *params)
                    times.append((time.perf_counter() - t0) * 1000)
                    await tx.rollback()
                cells += [f"{statistics.median(times):.2f}", index_of(plan)]
            out.append(cells)
        print(f"\njobs by state {dict(sorted(counts.items()))}, statistics taken while only 2,000 COMPLETED; "
              f"median of {args.rounds} rounds")
        print(table(["statement", "state = N: ms", "its index", "state::integer = N: ms", "its index"], out))
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await conn.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ready", type=int, default=40_960)
    ap.add_argument("--leased", type=int, default=20_480)
    ap.add_argument("--due", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    asyncio.run(main(ap.parse_args()))
