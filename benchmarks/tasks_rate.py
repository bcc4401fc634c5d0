"""What tasks cost over the plain API (docs/tasks.md): the no-op rows, end to end, through
``@app.task`` and through ``EnqueueRequest`` + ``@worker.handler``, in one run.

Starts a ``sepp serve`` (ServerProcess, group commit by default); then, from this process on
uvloop, each row runs a Worker (its defaults) and, while it runs, enqueues ``--jobs`` no-op
jobs with ``enqueue_many`` (batches of the server's ``max_enqueue_batch``, 4 in flight), and
waits until the worker ran every one:

* **plain**: ``AsyncClient.enqueue_many`` of ``EnqueueRequest(queue, "noop",
  payload=Payload.json({"i": i}))``; a ``@worker.handler("noop")`` that counts the job;
* **task**: ``noop.enqueue_many([(i,) for i in …])`` of an ``AsyncApp`` task
  ``def noop(i: int) -> None`` (bound, JSON ``{"args": [i], "kwargs": {}}``) that counts the
  call; the worker is ``app.worker()`` (the task's handler decodes and binds the arguments).

For each row: jobs/s from the first enqueue to the last job run (wall), and this process's
CPU per job (``time.process_time``: producer and worker together, every thread) in µs. Rows
alternate, ``--rounds`` times, each round on fresh queues; medians are printed, with the
task row's rate as a fraction of the plain row's (the goal: ≥ 0.9).

    python benchmarks/tasks_rate.py [--jobs 20000] [--rounds 3] [--mode group]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import uvloop
from _harness import table

import sepp
from sepp import AsyncClient, EnqueueRequest, Payload
from sepp.tasks import AsyncApp, AsyncTaskAck
from sepp.testing import ServerProcess
from sepp.worker import Job, Worker


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


async def plain_row(target: str, queue: str, jobs: int) -> None:
    """``enqueue_many`` of plain requests while a Worker with a ``@worker.handler`` drains them."""
    counter = Counter(jobs)
    worker = Worker(target, [queue], worker_id="bench-plain")

    @worker.handler("noop")
    async def noop(job: Job) -> None:
        counter.hit()

    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    async with AsyncClient(target) as client:
        results = await client.enqueue_many(
            EnqueueRequest(queue, "noop", payload=Payload.json({"i": i})) for i in range(jobs)
        )
    assert all(isinstance(r, sepp.EnqueueAck) for r in results)
    await counter.done.wait()
    await worker.stop(5)
    await run


async def task_row(target: str, queue: str, jobs: int) -> None:
    """``task.enqueue_many`` of task calls while ``app.worker()`` runs them."""
    counter = Counter(jobs)
    app = AsyncApp(target, worker_id="bench-task")

    @app.task(queue=queue, name="noop")
    async def noop(i: int) -> None:
        counter.hit()

    worker = app.worker()
    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    async with app:
        results = await noop.enqueue_many([(i,) for i in range(jobs)])
    assert all(isinstance(r, AsyncTaskAck) for r in results)
    await counter.done.wait()
    await worker.stop(5)
    await run


async def measure(row: Callable[[], Awaitable[None]], jobs: int) -> tuple[float, float]:
    """(jobs/s, this process's CPU µs per job) of one row."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    await row()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return jobs / wall, cpu / jobs * 1e6


async def main(args: argparse.Namespace) -> None:
    rows: dict[str, Callable[[str, str, int], Awaitable[None]]] = {
        "EnqueueRequest + @worker.handler": plain_row,
        "@app.task (enqueue_many + app.worker())": task_row,
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    with tempfile.TemporaryDirectory(prefix="sepp-bench-") as tmp:
        server = ServerProcess(Path(tmp) / "data", {"persist_mode": args.mode, "log_level": "warning"})
        server.start()
        try:
            for round_no in range(args.rounds):  # alternating: drift hits both rows alike
                order = list(rows.items()) if round_no % 2 == 0 else list(rows.items())[::-1]
                for index, (name, row) in enumerate(order):
                    queue = f"bench-{round_no}-{index}"
                    results[name].append(await measure(partial(row, server.grpc_target, queue, args.jobs), args.jobs))
        finally:
            server.terminate()
    medians = {
        name: (statistics.median(m[0] for m in got), statistics.median(m[1] for m in got))
        for name, got in results.items()
    }
    plain_rate = next(iter(medians.values()))[0]
    out: list[list[str]] = []
    for name, (rate, cpu) in medians.items():
        out.append([name, f"{rate:,.0f}", f"{cpu:.1f}", f"{rate / plain_rate:.2f}"])
    print(f"{args.jobs:,} no-op jobs per row, {args.rounds} round(s), persist_mode={args.mode}; medians")
    print(table(["row", "jobs/s (end to end)", "CPU µs/job (this process)", "× plain"], out))


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="group", help="the server's persist_mode")
    return ap.parse_args()


if __name__ == "__main__":
    args: Any = parse()
    uvloop.run(main(args))
