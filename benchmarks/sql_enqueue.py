"""Enqueue rate from one connection: sepp's SQL functions (one job per call, and
``enqueue_batch``), PgQueuer's own insert path (``Queries.enqueue``, one job and lists), and
sepp's gRPC path (``Client.enqueue`` and ``enqueue_batch``) — one run, one database, each
call its own transaction (autocommit), as a producer outside any transaction of its own
would send them. docs/benchmarks.md "Enqueue in the application's transaction".

    .venv/bin/python benchmarks/sql_enqueue.py [--dsn postgresql://postgres@127.0.0.1:5432/test]
        [--single 2000] [--jobs 20000] [--chunk 1000] [--pgqueuer-python ~/peers/.venv/pgqueuer/bin/python]

PgQueuer is not a sepp dependency: its part runs in an interpreter that has it
(``--pgqueuer-python``; skipped when there is none). Each system gets a schema of its own,
dropped at the end. Payloads: the same ~40-byte JSON object for every job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_DSN = os.environ.get("PG_TEST_DSN") or "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_PGQ = Path.home() / "peers" / ".venv" / "pgqueuer" / "bin" / "python"


def payload(i: int) -> bytes:
    """The benchmark's job body: a small JSON object, the same for every system."""
    return json.dumps({"i": i, "user": f"user-{i:06d}", "kind": "noop"}).encode()


def rate(count: int, seconds: float) -> dict[str, Any]:
    """One figure: jobs, seconds, jobs per second."""
    return {"count": count, "seconds": round(seconds, 3), "per_s": round(count / seconds) if seconds else None}


# ---------------------------------------------------------------- PgQueuer (own interpreter)


async def pgqueuer_part(dsn: str, single: int, jobs: int, chunk: int) -> dict[str, Any]:
    """PgQueuer's ``Queries.enqueue``: ``single`` one-job calls, then ``jobs`` in lists of ``chunk``."""
    import asyncpg
    from pgqueuer import AsyncpgDriver  # type: ignore[import-not-found]
    from pgqueuer.queries import Queries  # type: ignore[import-not-found]

    schema = f"bench_pgq_{os.getpid()}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        q = Queries(AsyncpgDriver(conn))
        await q.install()
        started = time.perf_counter()
        for i in range(single):
            await q.enqueue("noop", payload(i))
        one = rate(single, time.perf_counter() - started)
        started = time.perf_counter()
        for start in range(0, jobs, chunk):
            k = min(chunk, jobs - start)
            await q.enqueue(["noop"] * k, [payload(start + i) for i in range(k)], [0] * k)
        many = rate(jobs, time.perf_counter() - started)
        return {"pgqueuer single (Queries.enqueue)": one, f"pgqueuer bulk (Queries.enqueue lists of {chunk})": many}
    finally:
        await conn.close()
        await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await admin.close()


# ---------------------------------------------------------------- sepp


async def sepp_sql_part(dsn: str, single: int, jobs: int, chunk: int) -> tuple[dict[str, Any], str]:
    """sepp's SQL functions on a fresh schema: ``single`` ``enqueue`` calls, then ``jobs`` in
    ``enqueue_batch`` calls of ``chunk``. Returns the figures and the schema (for gRPC)."""
    import asyncpg

    from sepp.storage.postgres.schema import migrate

    schema = f"bench_sepp_{os.getpid()}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await migrate(conn, schema)
        one_sql = f"SELECT * FROM {schema}.enqueue($1, $2, $3)"
        started = time.perf_counter()
        for i in range(single):
            await conn.fetchrow(one_sql, "bench", "noop", payload(i))
        one = rate(single, time.perf_counter() - started)
        many_sql = f"SELECT count(*) FROM {schema}.enqueue_batch($1::text[], $2::text[], $3::bytea[])"
        started = time.perf_counter()
        for start in range(0, jobs, chunk):
            k = min(chunk, jobs - start)
            await conn.fetchval(many_sql, ["bench"] * k, ["noop"] * k, [payload(start + i) for i in range(k)])
        many = rate(jobs, time.perf_counter() - started)
        stored = await conn.fetchval(f"SELECT count(*) FROM {schema}.jobs")
        assert stored == single + jobs, stored
        await conn.execute(f"TRUNCATE {schema}.jobs")
        return {"sepp SQL single (sepp.enqueue)": one, f"sepp SQL batch (sepp.enqueue_batch of {chunk})": many}, schema
    finally:
        await conn.close()


def sepp_grpc_part(dsn: str, schema: str, single: int, jobs: int) -> dict[str, Any]:
    """sepp's gRPC path, one client, through a node on the same database: ``single``
    ``Client.enqueue`` calls, then ``jobs`` in ``enqueue_batch`` calls of the server's
    ``max_enqueue_batch`` (256)."""
    from sepp import Client, EnqueueRequest, Payload
    from sepp.testing import ServerProcess

    config = {"storage": "postgres", "postgres_dsn": dsn, "postgres": {"schema": schema}}
    with tempfile.TemporaryDirectory() as folder, ServerProcess(Path(folder), config) as server, \
            Client(server.grpc_target) as client:
        started = time.perf_counter()
        for i in range(single):
            client.enqueue(EnqueueRequest("bench", "noop", payload=Payload(payload(i))))
        one = rate(single, time.perf_counter() - started)
        started = time.perf_counter()
        for start in range(0, jobs, 256):
            k = min(256, jobs - start)
            client.enqueue_batch([EnqueueRequest("bench", "noop", payload=Payload(payload(start + i)))
                                  for i in range(k)])
        many = rate(jobs, time.perf_counter() - started)
    return {"sepp gRPC single (Client.enqueue)": one, "sepp gRPC batch (Client.enqueue_batch of 256)": many}


async def _drop(dsn: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--single", type=int, default=2000, help="one-job calls per path")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per batch path")
    parser.add_argument("--chunk", type=int, default=1000, help="jobs per SQL batch call")
    parser.add_argument("--pgqueuer-python", default=str(DEFAULT_PGQ), help="an interpreter with pgqueuer")
    parser.add_argument("--pgqueuer-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pgqueuer_only:
        print(json.dumps(asyncio.run(pgqueuer_part(args.dsn, args.single, args.jobs, args.chunk))))
        return
    results: dict[str, Any] = {}
    sql, schema = asyncio.run(sepp_sql_part(args.dsn, args.single, args.jobs, args.chunk))
    results.update(sql)
    try:
        results.update(sepp_grpc_part(args.dsn, schema, args.single, args.jobs))
    finally:
        asyncio.run(_drop(args.dsn, schema))
    if Path(args.pgqueuer_python).exists():
        out = subprocess.run([args.pgqueuer_python, __file__, "--pgqueuer-only", "--dsn", args.dsn, "--single",
                              str(args.single), "--jobs", str(args.jobs), "--chunk", str(args.chunk)],
                             capture_output=True, text=True, check=True, timeout=600)
        results.update(json.loads(out.stdout.strip().splitlines()[-1]))
    else:
        print(f"(PgQueuer skipped: no interpreter at {args.pgqueuer_python})", file=sys.stderr)
    width = max(map(len, results))
    for name, r in results.items():
        print(f"{name:<{width}}  {r['count']:>7,} jobs  {r['seconds']:>8.3f} s  {r['per_s']:>9,} jobs/s")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
