"""Metrics scrape benchmark (issue 11): the cost of ``GET /metrics`` with 100 queues and
1,000,000 stored jobs, on SQLite and on PostgreSQL.

For each backend: start ``sepp serve`` once (it creates the schema) and enqueue one job per
queue through it (the queue rows), stop it, bulk-insert the remaining jobs with one SQL
statement straight into the store (mixed states: 70% COMPLETED, 15% READY, 5% SCHEDULED,
2% RESERVED with live leases, 5% DEAD_LETTERED, 3% CANCELLED; priorities 0–9; nothing due
for a sweep), then start it again and time scrapes:

* ``scrape`` — the default server (``metrics_gauge_interval`` = 15 s): what Prometheus sees;
  the queue gauges come from the background read (the first scrape, which waits for it, is
  reported apart);
* ``store read`` — a server with ``metrics_gauge_interval`` = 0, where every scrape reads
  the store itself (``AdminStore.queue_gauges``): the cost of the background read.

PostgreSQL runs in a fresh schema of ``--postgres-dsn`` (dropped at the end), after a
``VACUUM ANALYZE`` of the filled table (what autovacuum does soon after such a load).
Prints a Markdown table.

    python benchmarks/metrics_scrape.py [--jobs 1000000] [--queues 100] [--scrapes 30]
        [--postgres-dsn postgresql://postgres@127.0.0.1:5432/test] [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc
from sepp.testing import ServerProcess

#: µs UTC "now" of the fill, and a time far in the future (no sweep touches the rows).
NOW = int(time.time() * 1e6)
FUTURE = NOW + 86_400 * 1_000_000 * 365

# state of row i: from (i / 100) % 100, so every queue (i % 100) gets every state.
_STATE = """CASE WHEN {k} < 70 THEN 4 WHEN {k} < 85 THEN 2 WHEN {k} < 90 THEN 1 WHEN {k} < 92 THEN 3
    WHEN {k} < 97 THEN 5 ELSE 6 END"""

SQLITE_FILL = f"""
WITH RECURSIVE s(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :n),
r AS (SELECT i, {_STATE.format(k="((i / 100) % 100)")} AS st FROM s)
INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload,
    encoding, lease_id, lease_expires_at, started_at, finished_at, purge_at, reason)
SELECT randomblob(16), printf('bench-%02d', i % :q), 't', st, i % 10,
    CASE st WHEN 1 THEN :future ELSE :now - i END, :now - i, CASE WHEN st = 2 OR st = 1 THEN 0 ELSE 1 END, 3,
    zeroblob(100), 'application/json',
    CASE WHEN st = 3 THEN randomblob(16) END, CASE WHEN st = 3 THEN :future END,
    CASE WHEN st >= 3 THEN :now - i END, CASE WHEN st >= 4 THEN :now - i END,
    CASE WHEN st >= 4 THEN :future END, CASE WHEN st = 5 THEN 'bench' END
FROM r;
"""

PG_FILL = f"""
INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload,
    encoding, lease_id, lease_expires_at, started_at, finished_at, purge_at, reason)
SELECT decode(md5(i::text || 'x'), 'hex'), 'bench-' || lpad((i % $2)::text, 2, '0'), 't', st, i % 10,
    CASE st WHEN 1 THEN $4 ELSE $3 - i END, $3 - i, CASE WHEN st <= 2 THEN 0 ELSE 1 END, 3,
    decode(repeat('00', 100), 'hex'), 'application/json',
    CASE WHEN st = 3 THEN decode(md5(i::text || 'l'), 'hex') END, CASE WHEN st = 3 THEN $4 END,
    CASE WHEN st >= 3 THEN $3 - i END, CASE WHEN st >= 4 THEN $3 - i END,
    CASE WHEN st >= 4 THEN $4 END, CASE WHEN st = 5 THEN 'bench' END
FROM (SELECT i, ({_STATE.format(k="((i / 100) % 100)")})::smallint AS st
      FROM generate_series($5::bigint, $1 - 1) AS i) AS r;
"""


def seed_queues(target: str, queues: int) -> None:
    """One job per queue through the server: the queue rows, with their settings."""
    import grpc

    with grpc.insecure_channel(target) as channel:
        stub = producer_pb2_grpc.ProducerServiceStub(channel)
        jobs = [pb.EnqueueRequest(queue=f"bench-{q:02d}", job_type="t", payload=pb.Payload(data=b"{}"))
                for q in range(queues)]
        stub.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=jobs), timeout=30)


def scrape_ms(url: str, n: int) -> list[float]:
    """Wall time of ``n`` sequential scrapes of ``url`` (ms); checks each has the gauges."""
    out = []
    for _ in range(n):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = resp.read()
        out.append((time.perf_counter() - started) * 1000)
        assert b"sepp_queue_jobs{" in body, "a scrape without the queue gauges"
    return out


def measure(data_dir: Path, config: dict[str, Any], scrapes: int) -> dict[str, list[float]]:
    """Start the filled server twice (default interval, then 0) and time scrapes."""
    out: dict[str, list[float]] = {}
    with ServerProcess(data_dir, config) as server:
        url = server.http_url + "/metrics"
        out["first scrape"] = scrape_ms(url, 1)
        out["scrape"] = scrape_ms(url, scrapes)
    with ServerProcess(data_dir, {**config, "metrics_gauge_interval": 0.0}) as server:
        url = server.http_url + "/metrics"
        scrape_ms(url, 1)  # warm the page cache
        out["store read (interval 0)"] = scrape_ms(url, max(3, scrapes // 5))
    return out


def fill_sqlite(data_dir: Path, jobs: int, queues: int) -> None:
    conn = sqlite3.connect(data_dir / "sepp.db")
    with conn:
        conn.execute(SQLITE_FILL, {"first": queues, "n": jobs, "q": queues, "now": NOW, "future": FUTURE})
    conn.close()


async def fill_postgres(dsn: str, schema: str, jobs: int, queues: int) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        await conn.execute(PG_FILL, jobs, queues, NOW, FUTURE, queues)
        await conn.execute("VACUUM ANALYZE jobs")
    finally:
        await conn.close()


async def drop_schema(dsn: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


def run_backend(backend: str, args: argparse.Namespace) -> tuple[dict[str, list[float]], float]:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        config: dict[str, Any] = {"sweep_interval": 1.0}
        schema = f"bench_metrics_{uuid.uuid4().hex[:8]}"
        if backend == "postgres":
            config.update(storage="postgres", postgres_dsn=args.postgres_dsn, postgres={"schema": schema})
        try:
            with ServerProcess(data_dir, config) as server:
                seed_queues(server.grpc_target, args.queues)
            started = time.perf_counter()
            if backend == "sqlite":
                fill_sqlite(data_dir, args.jobs, args.queues)
            else:
                asyncio.run(fill_postgres(args.postgres_dsn, schema, args.jobs, args.queues))
            fill_s = time.perf_counter() - started
            return measure(data_dir, config, args.scrapes), fill_s
        finally:
            if backend == "postgres":
                asyncio.run(drop_schema(args.postgres_dsn, schema))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=30)
    parser.add_argument("--postgres-dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    rows = []
    for backend in args.backends.split(","):
        figures, fill_s = run_backend(backend, args)
        print(f"{backend}: filled {args.jobs:,} jobs in {args.queues} queues in {fill_s:.1f} s", file=sys.stderr)
        for what, ms in figures.items():
            rows.append((backend, what, len(ms), statistics.median(ms), max(ms)))
    print(f"\n{args.jobs:,} jobs, {args.queues} queues\n")
    print("| backend | what | scrapes | p50 ms | max ms |")
    print("|---|---|---|---|---|")
    for backend, what, n, p50, top in rows:
        print(f"| {backend} | {what} | {n} | {p50:.1f} | {top:.1f} |")


if __name__ == "__main__":
    main()
