"""Search benchmark (issue 13 item 3): one page of each kind of search over 1,000,000 jobs.

Builds ``JobEngine`` + ``AdminEngine`` over a real store in this process (SQLite in a temp
folder, writer process; or PostgreSQL in a fresh schema with ``--postgres-dsn``), fills it
through the real enqueue path (``enqueue_batch``, 256 jobs a call, 4 in flight, so the
custom index is written as in production) and times ``AdminEngine.list_jobs`` — what the
``ListJobs`` RPC, the UI and ``sepp jobs list`` call — for each search, ``--repeat`` times.

The data (fixed seed): 4 queues, 20 job types (Zipf-like, plus ``rare_export`` on 1 job in
10,000), half the jobs with a custom map {user_id: int in 1..200,000, tenant: one of 20},
1 in 10 with an idempotency key; 20,000 jobs of queue ``webhooks`` dead-lettered half-way
through the fill, 50 of them with the error "TLS certificate expired", the rest
"connection refused by upstream".

Prints a Markdown table: per search the median and slowest page time (ms), the jobs on the
page and whether the page stopped at the scan bound (``scan_limited``).

    python benchmarks/search.py [--jobs 1000000] [--repeat 15] [--postgres-dsn DSN] [--data DIR]

``--data DIR`` (SQLite): fill the store in DIR and keep it; a later run with the same DIR
and ``--jobs`` finds it filled and goes straight to the timings (a 1,000,000-job fill takes
minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import table

from sepp.api.v1 import common_pb2 as pb
from sepp.domain.ids import job_id_text
from sepp.domain.params import ReserveParams, SettleKind, SettleParams
from sepp.server.admin import AdminEngine
from sepp.server.admin.search import with_search
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry
from sepp.storage.admin import JobQuery
from sepp.storage.config import PostgresSettings
from sepp.storage.factory import open_store
from sepp.storage.search import SCAN_ROWS

BATCH, IN_FLIGHT = 256, 4
QUEUES = ["emails", "billing", "reports", "webhooks"]
TYPES = [f"type_{i:02d}" for i in range(20)]
TENANTS = [f"tenant-{i}" for i in range(20)]
DEAD = 20_000
RARE_ERRORS = 50
PAYLOAD = pb.Payload(data=b'{"template": "welcome", "locale": "en-US"}' + b" " * 100, encoding="application/json")


def job(i: int, rnd: random.Random) -> pb.EnqueueRequest:
    """Job number ``i`` of the fill (see the module docstring)."""
    queue = "webhooks" if i % 50 == 0 else QUEUES[i % 3]
    job_type = "rare_export" if i % 10_000 == 7 else TYPES[min(19, int(rnd.paretovariate(1.2)) - 1)]
    req = pb.EnqueueRequest(queue=queue, job_type=job_type, payload=PAYLOAD)
    if i % 2 == 0:
        req.custom["user_id"].int_value = rnd.randint(1, 200_000)
        req.custom["tenant"].string_value = TENANTS[rnd.randrange(20)]
    if i % 10 == 3:
        req.idempotency_key = f"order-{i}"
    return req


async def fill(engine: JobEngine, start: int, stop: int, rnd: random.Random) -> None:
    """Enqueue jobs ``start`` … ``stop - 1`` in batches, ``IN_FLIGHT`` at a time."""
    starts = iter(range(start, stop, BATCH))

    async def producer() -> None:
        for b in starts:
            await engine.enqueue_batch([job(i, rnd) for i in range(b, min(b + BATCH, stop))])

    await asyncio.gather(*(producer() for _ in range(IN_FLIGHT)))


async def dead_letter(engine: JobEngine, n: int) -> None:
    """Reserve ``n`` webhooks jobs and nack them to DEAD_LETTERED with an error message."""
    store, done = engine.parts.store, 0
    policy = engine.parts.queues.policies()
    while done < n:
        now = engine.parts.clock.now()
        recs = await store.reserve(ReserveParams(["webhooks"], min(256, n - done), now,
                                                 {"webhooks": 30_000_000}, "bench", 0, ""))
        if not recs:
            raise RuntimeError(f"only {done} webhooks jobs to dead-letter")
        items = []
        for r in recs:
            message = "TLS certificate expired" if done % (n // RARE_ERRORS) == 0 else \
                f"connection refused by upstream (attempt {r.attempt})"
            assert r.lease_id is not None
            items.append(SettleParams(r.id, r.lease_id, SettleKind.DEAD_LETTER, now, -1, "NACK_DEAD_LETTER", "",
                                      message, ""))
            done += 1
        await store.settle(items, policy)


async def run(jobs: int, repeat: int, dsn: str, data: Path | None = None) -> list[list[str]]:
    """Fill a store (or reuse the one filled in ``data``) and time every search; the table's rows."""
    folder = data or Path(tempfile.mkdtemp(prefix="sepp-search-bench-"))
    marker = folder / f"filled-{jobs}"
    folder.mkdir(parents=True, exist_ok=True)
    reuse = data is not None and marker.exists()
    schema = f"bench_search_{os.getpid()}"
    extra: dict[str, Any] = {}
    if dsn:
        extra = {"storage": "postgres", "postgres_dsn": dsn, "postgres": PostgresSettings(schema=schema)}
    config = ServerConfig(data_dir=folder, persist_mode="async", **extra)  # type: ignore[arg-type]
    store = open_store(config)
    await store.open()
    rows: list[list[str]] = []
    try:
        registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes)
        parts = ServerParts.build(config, store, registry, Notifier())
        engine = JobEngine(parts)
        admin = AdminEngine(parts, store.admin)
        rnd = random.Random(13)
        if reuse:
            print(f"reusing the {jobs:,} jobs filled in {folder}", flush=True)
        else:
            started = time.perf_counter()
            await fill(engine, 0, jobs // 2, rnd)
            await dead_letter(engine, min(DEAD, jobs // 100))
            await fill(engine, jobs // 2, jobs, rnd)
            took = time.perf_counter() - started
            print(f"filled {jobs:,} jobs in {took:.0f} s ({jobs / took:,.0f} jobs/s)", flush=True)
            if data is not None:
                marker.touch()
        if dsn:
            await asyncio.to_thread(subprocess.run, ["psql", dsn, "-qc",
                                                     f"ANALYZE {schema}.jobs; ANALYZE {schema}.job_custom"],
                                    check=True)
        some = (await admin.list_jobs(JobQuery(queue="emails"), "", 1000)).jobs
        target = some[len(some) // 2].record
        keyed = next(s.record for s in some if s.record.idempotency_key)
        assert keyed.idempotency_key is not None
        probe = pb.EnqueueRequest()
        probe.ParseFromString(next(s.record.extras for s in some if s.record.extras) or b"")
        user = str(probe.custom["user_id"].int_value)
        tenant = probe.custom["tenant"].string_value
        dead = 5
        searches: list[tuple[str, Callable[[], JobQuery]]] = [
            ("id", lambda: with_search(JobQuery(), job_id=job_id_text(target.id))),
            ("idempotency key, every queue", lambda: with_search(JobQuery(), idempotency_key=keyed.idempotency_key
                                                                 or "")),
            ("idempotency key + queue", lambda: with_search(JobQuery(queue="emails"),
                                                            idempotency_key=keyed.idempotency_key or "")),
            ("custom user_id (≈2.5 jobs)", lambda: with_search(JobQuery(), custom=[("user_id", user)])),
            ("custom tenant (≈25,000 jobs)", lambda: with_search(JobQuery(), custom=[("tenant", tenant)])),
            ("custom user_id AND tenant", lambda: with_search(JobQuery(), custom=[("user_id", user),
                                                                                  ("tenant", tenant)])),
            ("custom tenant + state dead_lettered", lambda: with_search(JobQuery(state=dead),
                                                                       custom=[("tenant", tenant)])),
            ("job type, common", lambda: JobQuery(job_type="type_00")),
            ("job type, common, state ready, queue", lambda: JobQuery(job_type="type_03", state=2, queue="billing")),
            ("job type, rare (100 jobs)", lambda: JobQuery(job_type="rare_export")),
            ("error, common, dead_lettered", lambda: with_search(JobQuery(state=dead),
                                                                 error_contains="connection refused")),
            ("error, rare (50), dead_lettered", lambda: with_search(JobQuery(state=dead),
                                                                    error_contains="certificate expired")),
            ("error, rare (50), any state", lambda: with_search(JobQuery(), error_contains="certificate expired")),
            ("plain listing (no search), ready", lambda: JobQuery(state=2, queue="emails")),
        ]
        for name, build in searches:
            times, got, limited = [], 0, False
            for _ in range(repeat):
                t0 = time.perf_counter()
                page = await admin.list_jobs(build(), "", 50)
                times.append((time.perf_counter() - t0) * 1000)
                got, limited = len(page.jobs), page.scan_limited
            rows.append([name, f"{statistics.median(times):.1f}", f"{max(times):.1f}", str(got),
                         "yes" if limited else ""])
            print(" | ".join(rows[-1]), flush=True)
    finally:
        await store.close()
        if dsn:
            await asyncio.to_thread(subprocess.run, ["psql", dsn, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
                                    check=False, capture_output=True)
        if data is None:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def main() -> None:
    """Parse the flags, fill, time, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs to fill the store with")
    parser.add_argument("--repeat", type=int, default=15, help="times each search runs")
    parser.add_argument("--postgres-dsn", default="", help="run on PostgreSQL (a fresh schema) instead of SQLite")
    parser.add_argument("--data", type=Path, default=None,
                        help="SQLite: fill in this folder and keep it; reuse it when already filled")
    args = parser.parse_args()
    if args.data is not None and args.postgres_dsn:
        parser.error("--data is for SQLite")
    rows = asyncio.run(run(args.jobs, args.repeat, args.postgres_dsn, args.data))
    backend = "PostgreSQL" if args.postgres_dsn else "SQLite"
    print(f"\n{backend}, {args.jobs:,} jobs, page size 50, scan bound {SCAN_ROWS:,} candidates, "
          f"{args.repeat} runs each\n")
    print(table(["search", "median ms", "max ms", "jobs on page", "scan_limited"], rows))


if __name__ == "__main__":
    main()
