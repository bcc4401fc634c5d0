"""Workflow latencies (docs/workflows.md): a big chord's callback release, and a long
chain's per-step overhead beside a lone job's enqueue → start.

Starts a ``sepp serve`` (ServerProcess: SQLite group commit, or ``--postgres`` on the
machine's PostgreSQL in a fresh schema); from this process on uvloop, one ``Worker`` (its
defaults, concurrency 10) runs no-op handlers. Per round:

* **chord**: ``enqueue_workflow(chord([--children no-op children], callback))`` (9,999
  by default: with its callback that is the 10,000-node cap of one workflow); the worker
  runs the children, then the callback. Two figures of the one release:
  *worker side*, from the moment the worker holds the answer to the last child's ack
  (its ``on_outcome`` hook, ``time.perf_counter``) to the callback's handler start (the
  same clock; negative when the callback was already reserved before that answer came
  back); *server side*, from the ``finished_at`` of the child completed last to the
  callback attempt's ``started_at`` (when it was reserved; both stamped by the server).
* **chain**: ``enqueue_workflow(chain(--steps no-op steps))``; the per-step overhead is
  (start of the last step's handler − start of the first) ÷ (steps − 1): one step's ack,
  the release of the next in that commit, its reservation and its start.
* **lone**: ``--lone`` single ``enqueue`` calls of one no-op job to the idle worker (parked
  in its long poll), one after the other; the time from the call to the handler's start.

Medians over ``--rounds`` (the chord's p50/p99 pool every round's one sample; with 10
rounds p99 is the worst).

    python benchmarks/workflow_latency.py [--rounds 10] [--children 9999] [--steps 1000]
        [--lone 50] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import uvloop
from _harness import table
from e2e import pct

from sepp import AsyncClient, ClientOptions, EnqueueRequest, chain, chord
from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess
from sepp.worker import Job, JobReport, Worker

CHILDREN = "wf-children"
CALLBACKS = "wf-callbacks"
STEPS = "wf-steps"
LONE = "wf-lone"


class Marks:
    """What the handlers and the hook saw, ``time.perf_counter`` seconds."""

    def __init__(self) -> None:
        self.last_child_ack = 0.0
        self.callback_start = asyncio.Event()
        self.callback_at = 0.0
        self.steps: list[float] = []
        self.steps_done = asyncio.Event()
        self.steps_wanted = 0
        self.lone_at = 0.0
        self.lone = asyncio.Event()


def make_worker(target: str, marks: Marks) -> Worker:
    """The worker of every row (its defaults) with its no-op handlers and the ack hook."""
    worker = Worker(target, [CHILDREN, CALLBACKS, STEPS, LONE], worker_id="bench-wf")

    @worker.handler("child")
    async def child(job: Job) -> None:
        """No-op."""

    @worker.handler("callback")
    async def callback(job: Job) -> None:
        marks.callback_at = time.perf_counter()
        marks.callback_start.set()

    @worker.handler("step")
    async def step(job: Job) -> None:
        marks.steps.append(time.perf_counter())
        if len(marks.steps) >= marks.steps_wanted:
            marks.steps_done.set()

    @worker.handler("lone")
    async def lone(job: Job) -> None:
        marks.lone_at = time.perf_counter()
        marks.lone.set()

    @worker.on_outcome
    def acked(report: JobReport) -> None:
        if report.job.job_type == "child" and report.state == "completed":
            marks.last_child_ack = time.perf_counter()

    return worker


def _ts(t: Any) -> float:
    return float(t.seconds) + float(t.nanos) / 1e9


async def chord_round(client: AsyncClient, admin: AdminClient, marks: Marks, children: int) -> tuple[float, float]:
    """(worker-side ms, server-side ms) of one chord's callback release."""
    marks.callback_start.clear()
    wf = chord([EnqueueRequest(CHILDREN, "child") for _ in range(children)], EnqueueRequest(CALLBACKS, "callback"))
    ack = await client.enqueue_workflow(wf)
    await asyncio.wait_for(marks.callback_start.wait(), 600)
    worker_ms = (marks.callback_at - marks.last_child_ack) * 1000
    ids = [a.job_id for a in ack.acks]
    cb_id = ids[-1]

    def server_side() -> float:
        cb = admin.get_job(cb_id)
        while not cb.attempts:  # the attempt is recorded with its ack
            time.sleep(0.05)
            cb = admin.get_job(cb_id)
        last = max(_ts(s.job.finished_at) for s in admin.iter_jobs(queue=CHILDREN, state="completed"))
        admin.purge_queue(CHILDREN)
        return (_ts(cb.attempts[0].started_at) - last) * 1000

    return worker_ms, await asyncio.to_thread(server_side)


async def chain_round(client: AsyncClient, marks: Marks, steps: int) -> float:
    """Per-step overhead of one chain, ms."""
    marks.steps = []
    marks.steps_done.clear()
    marks.steps_wanted = steps
    await client.enqueue_workflow(chain(*[EnqueueRequest(STEPS, "step") for _ in range(steps)]))
    await asyncio.wait_for(marks.steps_done.wait(), 600)
    return (marks.steps[-1] - marks.steps[0]) / (steps - 1) * 1000


async def lone_round(client: AsyncClient, marks: Marks, count: int) -> list[float]:
    """``count`` lone jobs' enqueue → handler start, ms each."""
    out = []
    for _ in range(count):
        marks.lone.clear()
        await asyncio.sleep(0.05)  # let the worker park in its long poll
        t0 = time.perf_counter()
        await client.enqueue(EnqueueRequest(LONE, "lone"))
        await asyncio.wait_for(marks.lone.wait(), 60)
        out.append((marks.lone_at - t0) * 1000)
    return out


async def main(args: argparse.Namespace) -> None:
    config: dict[str, Any] = {"log_level": "warning"}
    if args.postgres:
        config |= {"storage": "postgres", "postgres_dsn": args.postgres,
                   "postgres": {"schema": f"bench_wf_{uuid.uuid4().hex[:8]}"}}
    worker_ms: list[float] = []
    server_ms: list[float] = []
    per_step: list[float] = []
    lone: list[float] = []
    lone_medians: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sepp-bench-wf-") as tmp:
        server = ServerProcess(Path(tmp) / "data", config).start()
        marks = Marks()
        worker = make_worker(server.grpc_target, marks)
        run = asyncio.create_task(worker.run(install_signal_handlers=False))
        try:
            # A 10,000-node call on a loaded machine outlasts the default 10 s deadline.
            async with AsyncClient(server.grpc_target, options=ClientOptions(timeout=300)) as client:
                with AdminClient(server.grpc_target) as admin:
                    for r in range(args.rounds):
                        w, s = await chord_round(client, admin, marks, args.children)
                        worker_ms.append(w)
                        server_ms.append(s)
                        per_step.append(await chain_round(client, marks, args.steps))
                        got = await lone_round(client, marks, args.lone)
                        lone += got
                        lone_medians.append(statistics.median(got))
                        print(f"round {r + 1}: chord release {w:.1f} ms (worker) {s:.1f} ms (server); "
                              f"chain {per_step[-1]:.2f} ms/step; lone p50 {lone_medians[-1]:.2f} ms",
                              file=sys.stderr)
        finally:
            await worker.stop(5)
            await run
            server.terminate()
    backend = "PostgreSQL" if args.postgres else "SQLite group commit"
    print(f"{backend}; one Worker (defaults); {args.rounds} round(s)")
    print(table(["figure", "p50 ms", "p99 ms", "samples"], [
        [f"chord of {args.children:,}: last child's ack answered → callback handler starts (worker)",
         f"{pct(worker_ms, 0.5):.1f}", f"{pct(worker_ms, 0.99):.1f}", str(len(worker_ms))],
        [f"chord of {args.children:,}: last child finished_at → callback reserved (server)",
         f"{pct(server_ms, 0.5):.1f}", f"{pct(server_ms, 0.99):.1f}", str(len(server_ms))],
        [f"chain of {args.steps:,}: per step (start → next start), median of rounds",
         f"{statistics.median(per_step):.2f}", "", str(len(per_step))],
        ["lone job: enqueue → handler start (idle worker)", f"{pct(lone, 0.5):.2f}", f"{pct(lone, 0.99):.2f}",
         str(len(lone))],
    ]))
    print(f"chain step ÷ lone p50: {statistics.median(per_step) / pct(lone, 0.5):.2f}")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--children", type=int, default=9_999,
                    help="children of the chord (9,999 and its callback fill the 10,000-node cap)")
    ap.add_argument("--steps", type=int, default=1_000)
    ap.add_argument("--lone", type=int, default=50, help="lone jobs per round")
    ap.add_argument("--postgres", nargs="?", const="postgresql://postgres@127.0.0.1:5432/test", default="",
                    help="run on PostgreSQL (a DSN; default the machine's test database)")
    return ap.parse_args()


if __name__ == "__main__":
    uvloop.run(main(parse()))
