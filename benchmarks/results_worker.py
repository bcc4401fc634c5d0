"""What storing a job's result costs the Worker runtime alone: one in-process ``Worker``
(``--concurrency 256 --prefetch 256``, uvloop) drains N no-op jobs whose handler returns
``None``, then N whose handler returns the 100-byte JSON record of ``results_cost.py``, in
alternation; this process's CPU µs per job (``time.process_time``: the event loop, gRPC's
threads, the garbage collector) for each row.

``results_cost.py`` counts two worker processes next to the server and the producer on two
cores; under load their figure moves by ±1.5 µs/job between rounds, the size of what a cut
on the worker's side saves. Here the server runs in its own process (not counted) and the
queue is filled before the clock starts, so this process only runs the Worker: the
difference between the rows is what a returned dict costs from the handler's return to
the Settle's bytes (the JSON text, the ``Outcome``, the settle item, gRPC carrying the
larger call), plus whatever that changes in the runtime's own rhythm (the Reserve and
Settle calls made, also printed).

One drain: a freshly filled queue (``worker_overhead.fill``, outside the measured window),
a new ``Worker``, its handler counting the jobs; CPU from its start to its stop. The rows
alternate ABBA over ``--rounds`` on one server (SQLite, ``persist_mode = "group"``).

    python benchmarks/results_worker.py [--n 20000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from _harness import table
from worker_overhead import QUEUE, fill

from sepp.testing import ServerProcess
from sepp.worker import Job, Worker

#: The result row's return value: a dict of exactly 100 bytes of compact JSON (``results_cost.py``'s).
RECORD: dict[str, Any] = {"status": "sent", "user_id": 42, "message_id": "m" * 54}


async def drain(target: str, jobs: int, value: object) -> tuple[float, int, int]:
    """Drain ``jobs`` jobs with a Worker whose handler returns ``value``; (CPU seconds of this
    process from the worker's start to its stop, Reserve calls, Settle calls)."""
    worker = Worker(target, [QUEUE], worker_id="bench-results", concurrency=256, prefetch=256)
    done = 0
    finished = asyncio.Event()

    @worker.handler("noop")
    async def noop(job: Job) -> object:
        nonlocal done
        done += 1
        if done >= jobs:
            finished.set()
        return value

    cpu0 = time.process_time()
    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    await finished.wait()
    await worker.stop(5)
    await run
    return time.process_time() - cpu0, worker.stats.get("reserve_calls", 0), worker._settler.calls


async def main(args: argparse.Namespace) -> None:
    """Run the rounds and print the table."""
    rows: dict[str, object] = {"none": None, "json": RECORD}
    got: dict[str, list[tuple[float, int, int]]] = {name: [] for name in rows}
    with tempfile.TemporaryDirectory(prefix="sepp-results-worker-") as tmp:
        with ServerProcess(Path(tmp) / "data", {"persist_mode": "group", "log_level": "warning"}) as server:
            for r in range(args.rounds):
                for name in (list(rows) if r % 2 == 0 else list(reversed(rows))):
                    await fill(server.grpc_target, args.n)
                    got[name].append(await drain(server.grpc_target, args.n, rows[name]))
    out = []
    for name, runs in got.items():
        us = [cpu / args.n * 1e6 for cpu, _, _ in runs]
        reserves, settles = (statistics.median(run[i] for run in runs) for i in (1, 2))
        out.append([f"handler returns {name}", f"{statistics.median(us):.2f}", ", ".join(f"{u:.1f}" for u in us),
                    f"{reserves:.0f}", f"{settles:.0f}"])
    none = statistics.median(cpu for cpu, _, _ in got["none"])
    res = statistics.median(cpu for cpu, _, _ in got["json"])
    out.append(["result's extra CPU µs/job", f"{(res - none) / args.n * 1e6:+.2f}", "", "", ""])
    print(f"N = {args.n:,} jobs per drain, one in-process Worker (concurrency 256, prefetch 256); "
          f"median of {args.rounds} rounds")
    print(table(["row", "worker CPU µs/job", "rounds", "Reserve calls", "Settle calls"], out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--n", type=int, default=20_000, help="jobs per drain")
    ap.add_argument("--rounds", type=int, default=6, help="rounds, each one drain of each row")
    uvloop.run(main(ap.parse_args()))
