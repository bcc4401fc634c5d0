"""Job-type figures benchmark (issue 13 item 2): the cost of counting on the settle path and
of reading a queue's figures over a full day.

* ``settle path`` — in-process ``timeit`` of ``TypeRollup.on_settled`` for a batch of 256
  settled acks of one queue (one job type; 4 types taking turns, the worst case of the
  last-key shortcut) and for one single ack, each timed, against an empty loop unpacking the
  same 256 tuples (the machine's pace).
* ``read`` — a store filled with what a full day of flushes leaves for ``--types`` job types
  of one queue busy every minute (minute rows for two hours, hour rows for 25, ``--buckets``
  run-time buckets each: spread-out run times) through ``AdminStore.add_type_figures``, then
  ``AdminEngine.type_figures`` timed (median of ``--reads``), on SQLite and PostgreSQL.

    python benchmarks/type_figures.py [--types 10] [--buckets 12] [--reads 9]
        [--postgres-dsn postgresql://postgres@127.0.0.1:5432/test] [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

from sepp.domain.clock import FakeClock
from sepp.domain.params import SettleKind, SettleParams, SettleResult
from sepp.server.admin.type_figures import DAY_MINUTES, MINUTE_US, TypeRollup
from sepp.storage.type_figures import TypeMinute, TypeRunBucket

NOW = 1_790_000_000_000_000


def _batch(n: int, types: int = 1) -> tuple[list[SettleParams], list[SettleResult]]:
    """``n`` settled acks of ``types`` job types taking turns (each text a fresh object, as read
    from the store)."""
    items = [SettleParams(os.urandom(16), os.urandom(16), SettleKind.ACK, NOW) for _ in range(n)]
    results = [SettleResult(None, 4, NOW, 1, "".join(["emai", "ls"]), NOW - 1000 * (i + 1) * 37,
                            "".join(["type-", str(i % types)])) for i in range(n)]
    return items, results


def settle_path() -> None:
    """Print ns per job of the rollup's settled subscriber."""
    items, results = _batch(256)
    mixed_items, mixed_results = _batch(256, 4)
    one_items, one_results = _batch(1)
    rollup = TypeRollup(FakeClock(NOW))

    def empty() -> None:
        for p, r in zip(items, results, strict=False):
            _error, _state, _run_at, _attempt, _queue, _started, _type = r
            _ = p[2]

    def batch() -> None:
        rollup.on_settled(items, results)

    def mixed() -> None:
        rollup.on_settled(mixed_items, mixed_results)

    def single() -> None:
        rollup.on_settled(one_items, one_results)

    def fold() -> None:   # what a flush does with the run times of 200 batches
        rollup.take()

    rounds = 200
    for name, fn, jobs in (("empty loop (256)", empty, 256), ("on_settled, batch of 256, one type", batch, 256),
                           ("on_settled, batch of 256, 4 types taking turns", mixed, 256),
                           ("on_settled, one ack", single, 1)):
        # A flush between repeats, as every few seconds in a server (the lists stay short).
        best = min(timeit.repeat(fn, setup=rollup.take, number=rounds, repeat=7))
        print(f"| {name} | {best / rounds / jobs * 1e9:,.0f} ns a job |")
    folds = []
    for _ in range(7):
        for _ in range(rounds):
            batch()
        started = time.perf_counter()
        fold()
        folds.append(time.perf_counter() - started)
    print(f"| the flush's bucketing of those run times (off the settle path) | "
          f"{min(folds) / rounds / 256 * 1e9:,.0f} ns a job |")


async def read(backend: str, dsn: str, types: int, buckets: int, reads: int) -> None:
    """Fill one queue's day of figures and time the read."""
    from sepp.server.admin import AdminEngine
    from sepp.server.config import ServerConfig
    from sepp.server.notifier import Notifier
    from sepp.server.parts import ServerParts
    from sepp.server.queues import QueueRegistry
    from sepp.storage.factory import open_store

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    extra: dict[str, Any] = {"storage": "postgres", "postgres_dsn": dsn, "postgres": {"schema": schema}} \
        if backend == "postgres" else {}
    with tempfile.TemporaryDirectory() as folder:
        cfg = ServerConfig(data_dir=Path(folder), **extra)
        clock = FakeClock(NOW)
        store = open_store(cfg, clock)
        await store.open()
        try:
            registry = QueueRegistry(cfg.queue_defaults, cfg.strict, cfg.limits.max_encoding_bytes,
                                     cfg.limits.max_queues)
            admin = AdminEngine(ServerParts.build(cfg, store, registry, Notifier(), clock=clock), store.admin)
            await admin.declare_queue("emails")
            now_minute = NOW // MINUTE_US
            started = time.perf_counter()
            rows = 0
            # What a day of flushes leaves: minute rows for two hours, hour rows for 25.
            keep = (now_minute - 120, now_minute - now_minute % 60 - DAY_MINUTES)
            for step, first in [(1, now_minute - m) for m in range(120)] + \
                    [(60, now_minute - now_minute % 60 - 60 * h) for h in range(25)]:
                minutes = [TypeMinute("emails", f"type-{t}", step, first, 50 * step, 2, 1, 53 * step, 900_000)
                           for t in range(types)]
                runs = [TypeRunBucket("emails", f"type-{t}", step, first, 100 + b, 4 * step)
                        for t in range(types) for b in range(buckets)]
                await store.admin.add_type_figures(minutes, runs, *keep)
                rows += len(minutes) + len(runs)
            fill = time.perf_counter() - started
            if backend == "postgres":
                await store.reads.fetch("ANALYZE job_type_figures")  # type: ignore[attr-defined]
                await store.reads.fetch("ANALYZE job_type_runtimes")  # type: ignore[attr-defined]
            times = []
            for _ in range(reads):
                t0 = time.perf_counter()
                figures = await admin.type_figures("emails")
                times.append(time.perf_counter() - t0)
            assert len(figures) == types
            print(f"| {backend} | {types} | {buckets} | {rows:,} | {fill:.1f} s | "
                  f"{statistics.median(times) * 1000:.1f} ms | {max(times) * 1000:.1f} ms |")
        finally:
            if backend == "postgres":
                await store.reads.fetch(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[attr-defined]
            await store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--types", type=int, default=10)
    parser.add_argument("--buckets", type=int, default=12)
    parser.add_argument("--reads", type=int, default=9)
    parser.add_argument("--postgres-dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    print("| settle path | cost |\n| --- | --- |")
    settle_path()
    print("\n| backend | job types | buckets a minute | rows | fill | read median | read max |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for backend in args.backends.split(","):
        asyncio.run(read(backend, args.postgres_dsn, args.types, args.buckets, args.reads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
