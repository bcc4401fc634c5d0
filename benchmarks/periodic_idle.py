"""What 10,000 idle periodic schedules cost one node (issue 12 "Benchmark": < 5% of one core).

Builds a node's core in this process — store, engine and ``PeriodicScheduler`` with its real
loop on the system clock — declares N schedules (admin-made rows, daily cron expressions in
five time zones, none due during the measurement), then measures the process's CPU time
(every thread: the event loop, the SQLite writer thread or asyncpg) over a window of wall
time in which nothing is due. On PostgreSQL (a shared store) that includes the reload of every
schedule every ``REFRESH_EVERY`` seconds, which is the idle cost that matters there.

    python benchmarks/periodic_idle.py                      # SQLite, 10,000 schedules, 30 s
    python benchmarks/periodic_idle.py --backend postgres --dsn postgresql://postgres@127.0.0.1:5432/test

Prints one line: schedules, backend, window, CPU seconds, % of one core, jobs enqueued (0).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.periodic.scheduler import PeriodicScheduler
from sepp.server.periodic.spec import PeriodicSettings
from sepp.server.queues import QueueRegistry
from sepp.storage.config import PostgresSettings, SQLiteSettings
from sepp.storage.factory import open_store

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney")


def quiet_cron(rng: random.Random, zone: str, window_s: float) -> str:
    """A daily ``M H * * *`` whose next run in ``zone`` is later than the window (+ a margin)."""
    now = datetime.now(UTC)
    while True:
        hour, minute = rng.randrange(24), rng.randrange(60)
        local = now.astimezone(ZoneInfo(zone))
        at = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if at <= local:
            at += timedelta(days=1)
        if (at - local).total_seconds() > window_s + 900:  # loading 10,000 rows takes a while
            return f"{minute} {hour} * * *"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedules", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window, wall seconds")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sepp-periodic-idle-"))
    schema = f"bench_periodic_{int(time.time())}"
    if args.backend == "sqlite":
        cfg = ServerConfig(data_dir=folder, sqlite=SQLiteSettings(writer="thread"))
    else:
        cfg = ServerConfig(storage="postgres", postgres_dsn=args.dsn, postgres=PostgresSettings(schema=schema))
    store = open_store(cfg)
    await store.open()
    try:
        registry = QueueRegistry(cfg.queue_defaults, cfg.strict, cfg.limits.max_encoding_bytes, cfg.limits.max_queues)
        parts = ServerParts.build(cfg, store, registry, Notifier())
        engine = JobEngine(parts)
        rng = random.Random(12)
        for i in range(args.schedules):
            zone = ZONES[i % len(ZONES)]
            spec = PeriodicSettings(name=f"s{i:05d}", cron=quiet_cron(rng, zone, args.seconds), timezone=zone,
                                    queue="bench", job_type="t")
            await store.put_periodic(spec.name, spec.to_json(), "admin", parts.clock.now())
        scheduler = PeriodicScheduler(parts, engine)
        started = time.perf_counter()
        await scheduler.start()
        load_s = time.perf_counter() - started
        await asyncio.sleep(2.0)  # settle: the first round, the first sleep
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(args.seconds)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        await scheduler.stop()
        print(f"schedules={args.schedules} backend={args.backend} start={load_s:.2f}s window={wall:.1f}s "
              f"cpu={cpu:.3f}s core={100 * cpu / wall:.2f}% jobs={scheduler.runs}")
    finally:
        await store.close()
        if args.backend == "postgres":
            import asyncpg

            conn = await asyncpg.connect(args.dsn)
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
