"""What a dependency costs end to end (docs/workflows.md): no-op jobs with one dependency
each beside plain no-op jobs, same workers, same run.

Starts a ``sepp serve`` (ServerProcess, SQLite group commit; ``--postgres`` on the
machine's PostgreSQL); from this process on uvloop, each row runs a Worker (its defaults)
and, while it runs, enqueues ``--jobs`` no-op jobs, then waits until the worker ran every
one. The rows:

* **plain**: ``enqueue_many`` of ``--jobs`` plain jobs (batches of 256, 4 in flight).
* **pairs, one workflow per 256 jobs**: ``enqueue_workflow`` of 128 two-step chains per
  call (4 calls in flight): half the jobs depend on another job of the run, and every one
  of those is stored DEFERRED and released by its dependency's ack (the edges are stored
  with the jobs, so the dependency cannot have run yet). This is the row the target is
  about: "each job depends on one other job of the run, half released by an ack".
* **pairs, depends_on**: 128 jobs by ``enqueue_many``, then, on their acks, 128 jobs each
  ``depends_on`` one of them (4 such pipelines). A dependency the worker already completed
  by then stores its dependent READY at once, so this row mixes releases by an ack with
  dependencies found COMPLETED at enqueue (the share depends on the machine's pace).

For each row: jobs/s from the first enqueue to the last job run (wall); this process's CPU
per job (producer and worker, ``time.process_time``) and the server's (its process tree,
``/proc``), µs. CPU per job is the figure that holds on a loaded machine. Rows alternate,
``--rounds`` times, each round on fresh queues; medians are printed, with each row's rate
and server CPU as a multiple of the plain row's (the target: rate ≥ 0.7 × plain).

    python benchmarks/dependency_rate.py [--jobs 20000] [--rounds 3] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import uvloop
from _harness import table, tree_cpu

import sepp
from sepp import AsyncClient, EnqueueRequest, Workflow
from sepp.testing import ServerProcess
from sepp.worker import Job, Worker

BATCH = 256
IN_FLIGHT = 4


class Counter:
    """Jobs run so far; ``done`` is set once ``target`` were."""

    def __init__(self, target: int) -> None:
        self.n = 0
        self.target = target
        self.done = asyncio.Event()

    def hit(self) -> None:
        self.n += 1
        if self.n >= self.target:
            self.done.set()


async def in_flight(calls: list[Callable[[], Awaitable[None]]]) -> None:
    """Run ``calls`` with at most ``IN_FLIGHT`` at a time, in order."""
    todo = iter(calls)

    async def lane() -> None:
        for call in todo:
            await call()

    await asyncio.gather(*(lane() for _ in range(IN_FLIGHT)))


async def send_plain(client: AsyncClient, queue: str, jobs: int) -> None:
    results = await client.enqueue_many(EnqueueRequest(queue, "noop") for _ in range(jobs))
    assert all(isinstance(r, sepp.EnqueueAck) for r in results)


async def send_workflows(client: AsyncClient, queue: str, jobs: int) -> None:
    async def one(pairs: int) -> None:
        wf = Workflow()
        for _ in range(pairs):
            wf.add(EnqueueRequest(queue, "noop"), after=[wf.add(EnqueueRequest(queue, "noop"))])
        await client.enqueue_workflow(wf)

    await in_flight([partial(one, min(BATCH, jobs - i) // 2) for i in range(0, jobs, BATCH)])


async def send_depends_on(client: AsyncClient, queue: str, jobs: int) -> None:
    async def one(pairs: int) -> None:
        roots = await client.enqueue_many(EnqueueRequest(queue, "noop") for _ in range(pairs))
        ids = [r.job_id for r in roots if isinstance(r, sepp.EnqueueAck)]
        assert len(ids) == pairs
        deps = await client.enqueue_many(EnqueueRequest(queue, "noop", depends_on=[i]) for i in ids)
        assert all(isinstance(r, sepp.EnqueueAck) for r in deps)

    await in_flight([partial(one, min(BATCH, jobs - i) // 2) for i in range(0, jobs, BATCH)])


async def row(target: str, queue: str, jobs: int, send: Callable[[AsyncClient, str, int], Awaitable[None]]) -> None:
    """``send`` the row's jobs while a Worker with a no-op handler drains them."""
    counter = Counter(jobs)
    worker = Worker(target, [queue], worker_id="bench-deps")

    @worker.handler("noop")
    async def noop(job: Job) -> None:
        counter.hit()

    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    async with AsyncClient(target) as client:
        await send(client, queue, jobs)
    await asyncio.wait_for(counter.done.wait(), 600)
    await worker.stop(5)
    await run


async def main(args: argparse.Namespace) -> None:
    rows: dict[str, Callable[[AsyncClient, str, int], Awaitable[None]]] = {
        "plain (enqueue_many)": send_plain,
        "pairs, one workflow per 256 jobs (half released by an ack)": send_workflows,
        "pairs, depends_on an enqueued job (enqueue_many)": send_depends_on,
    }
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name in rows}
    config: dict[str, Any] = {"persist_mode": "group", "log_level": "warning"}
    if args.postgres:
        config |= {"storage": "postgres", "postgres_dsn": args.postgres,
                   "postgres": {"schema": f"bench_deps_{uuid.uuid4().hex[:8]}"}}
    with tempfile.TemporaryDirectory(prefix="sepp-bench-deps-") as tmp:
        server = ServerProcess(Path(tmp) / "data", config).start()
        try:
            for r in range(args.rounds):  # rotating: drift hits every row alike
                names = list(rows)
                names = names[r % len(names):] + names[:r % len(names)]
                for index, name in enumerate(names):
                    queue = f"bench-{r}-{index}"
                    cpu0, srv0, t0 = time.process_time(), tree_cpu(server.pid), time.perf_counter()
                    await row(server.grpc_target, queue, args.jobs, rows[name])
                    wall = time.perf_counter() - t0
                    cpu, srv = time.process_time() - cpu0, tree_cpu(server.pid) - srv0
                    got[name].append((args.jobs / wall, cpu / args.jobs * 1e6, srv / args.jobs * 1e6))
        finally:
            server.terminate()
    med = {name: tuple(statistics.median(m[i] for m in runs) for i in range(3)) for name, runs in got.items()}
    plain = med["plain (enqueue_many)"]
    out = [[name, f"{rate:,.0f}", f"{rate / plain[0]:.2f}", f"{cpu:.0f}", f"{srv:.0f}", f"{srv / plain[2]:.2f}"]
           for name, (rate, cpu, srv) in med.items()]
    backend = "PostgreSQL" if args.postgres else "SQLite group commit"
    print(f"{args.jobs:,} no-op jobs per row, {args.rounds} round(s), {backend}; medians")
    print(table(["row", "jobs/s", "× plain", "CPU µs/job (this process)", "server CPU µs/job",
                 "server CPU × plain"], out))


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--postgres", nargs="?", const="postgresql://postgres@127.0.0.1:5432/test", default="",
                    help="run on PostgreSQL (a DSN; default the machine's test database)")
    return ap.parse_args()


if __name__ == "__main__":
    uvloop.run(main(parse()))
