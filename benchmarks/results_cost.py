"""What storing a job's result costs end to end: the peer harness's no-op job row
(``/work/shared/peers/run_sepp.py``) with handlers returning ``None`` and with handlers
returning a 100-byte result, run in alternation, and the ratio of the two (target ≥ 0.9).

One run, as the peer harness's sepp row: a fresh ``sepp serve`` (ServerProcess: SQLite,
``persist_mode = "group"``, a new data folder); the producer makes one
``Client.enqueue_many()`` call over a generator of N requests
(``EnqueueRequest("bench", "noop", payload=Payload.json({"i": i}))``, batches of the
server's ``max_enqueue_batch``, 4 in flight); two worker processes,
``sepp worker results_cost:worker --concurrency 256 --prefetch 256 --log-level warning
--quiet`` (this file is also the module holding the Worker), drain them.

The result row's handler returns a ``dict`` whose compact JSON is exactly 100 bytes, so
the result is stored as ``application/json`` — what a handler returning a small record
gets, the result encoding path a user takes most (``--result bytes`` returns 100 raw bytes
instead, ``application/octet-stream``).

Timing. The queue is declared and paused and the workers are started first; once both
are polling (``ListWorkers``) the clock starts: enqueue (``enqueue_s``), resume the queue,
then drain until the server's queue stats show all N COMPLETED (``drain_s``: a result is
written with the ack, after the handler body, so the end of the last body — the peer
harness's end — would leave the result writes out). jobs/s = N / (enqueue_s + drain_s), the
peer harness's end-to-end rate without the workers' start-up, which the pause keeps out of
the window as the peer harness keeps it out of its steady drain. CPU µs/job: CPU seconds
(user + system) in that window of this process (the producer), the two worker processes
and the server (with its SQLite writer child), from ``/proc``, divided by N — the peer
harness's CPU figure without the workers' start-up and shutdown, the same in both rows,
which would only water the difference down.

Each round runs both rows, each on a fresh server; the order swaps every round (ABBA), so
drift on the machine hits both alike. The table shows the median over ``--rounds`` and each
round's figure; the ratio is result ÷ no result of the medians (each round's own ratio
after it).

    python benchmarks/results_cost.py [--n 20000] [--rounds 3] [--result json|bytes]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sepp.worker import Job, Worker

QUEUE = "bench"
JOB_TYPE = "noop"
HERE = Path(__file__).resolve().parent
#: Which value the handlers return: ``none``, ``json`` or ``bytes`` (set by the driver).
MODE = os.environ.get("RESULTS_COST_MODE", "none")


def _record(size: int = 100) -> dict[str, Any]:
    """A small record whose compact JSON (what the Worker stores) is exactly ``size`` bytes."""
    base: dict[str, Any] = {"status": "sent", "user_id": 42, "message_id": ""}
    pad = size - len(json.dumps(base, separators=(",", ":")))
    base["message_id"] = "m" * pad
    return base


JSON_RESULT = _record()
BYTES_RESULT = b"r" * 100
assert len(json.dumps(JSON_RESULT, separators=(",", ":"))) == len(BYTES_RESULT) == 100

worker = Worker("127.0.0.1:7700", queues=[QUEUE], concurrency=256, prefetch=256, shutdown_grace=5.0)


@worker.handler(JOB_TYPE)
async def noop(job: Job) -> object:
    """The no-op handler: returns nothing, the 100-byte record or 100 bytes (``MODE``)."""
    if MODE == "json":
        return JSON_RESULT
    if MODE == "bytes":
        return BYTES_RESULT
    return None


# ------------------------------------------------------------------ driver


@dataclass
class Run:
    """One measured run: seconds of each part and CPU seconds of each process kind."""

    jobs: int
    enqueue_s: float
    drain_s: float
    producer_cpu: float
    workers_cpu: float
    server_cpu: float

    @property
    def rate(self) -> float:
        """End-to-end jobs/s."""
        return self.jobs / (self.enqueue_s + self.drain_s)

    def us(self, cpu: float) -> float:
        """``cpu`` seconds as µs per job."""
        return cpu / self.jobs * 1e6

    @property
    def cpu_us(self) -> float:
        """CPU µs per job of every process counted."""
        return self.us(self.producer_cpu + self.workers_cpu + self.server_cpu)


def _completed(admin: Any) -> tuple[int, int]:
    """(completed, dead-lettered) of ``QUEUE`` from the server's stats."""
    for s in admin.queue_stats([QUEUE]):
        if s.queue == QUEUE:
            return int(s.completed), int(s.dead_lettered)
    return 0, 0


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each worker we started (by pid), then wait; SIGKILL after 15 s."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def one_run(folder: Path, mode: str, jobs: int, workers: int) -> Run:
    """Start a fresh server and ``workers`` worker processes returning ``mode`` results,
    enqueue and drain ``jobs`` jobs; raises ``RuntimeError`` when not all of them completed
    or a result is not what the handler returned."""
    from _harness import tree_cpu

    from sepp import Client, EnqueueAck, EnqueueRequest, Payload, Rejection
    from sepp.client.admin import AdminClient
    from sepp.testing import ServerProcess

    exe = str(Path(sys.executable).with_name("sepp"))
    procs: list[subprocess.Popen[bytes]] = []
    with ServerProcess(folder / "data", {"persist_mode": "group", "log_level": "warning"}) as server, \
            Client(server.grpc_target) as client, AdminClient(server.grpc_target) as admin:
        admin.declare_queue(QUEUE)
        admin.pause_queue(QUEUE)
        env = {**os.environ, "RESULTS_COST_MODE": mode}
        log = open(folder / f"workers-{mode}.log", "wb")  # closed below
        try:
            cmd = [exe, "worker", "results_cost:worker", "--server", server.grpc_target, "--queues", QUEUE,
                   "--concurrency", "256", "--prefetch", "256", "--log-level", "warning", "--quiet"]
            procs = [subprocess.Popen(cmd, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
                     for _ in range(workers)]
            end = time.monotonic() + 120
            while len(admin.list_workers().workers) < workers:
                if time.monotonic() > end or any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"the workers did not start: see {folder}/workers-{mode}.log")
                time.sleep(0.05)
            client.get_server_info()  # cached before the clock starts, as after any first call
            pids = [server.pid, *(p.pid for p in procs)]
            cpu0 = [time.process_time(), *(tree_cpu(pid) for pid in pids)]
            t0 = time.perf_counter()
            gen = (EnqueueRequest(QUEUE, JOB_TYPE, payload=Payload.json({"i": i})) for i in range(jobs))
            results = client.enqueue_many(gen)
            t1 = time.perf_counter()
            if sum(isinstance(x, EnqueueAck) for x in results) != jobs:
                refused = [x for x in results if isinstance(x, Rejection)]
                raise RuntimeError(f"{len(refused)} of {jobs} jobs refused: {refused[:3]}")
            admin.resume_queue(QUEUE)
            while (done := _completed(admin))[0] + done[1] < jobs:
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"a worker exited: see {folder}/workers-{mode}.log")
                time.sleep(0.01)
            t2 = time.perf_counter()
            cpu1 = [time.process_time(), *(tree_cpu(pid) for pid in pids)]
            if done != (jobs, 0):
                raise RuntimeError(f"{done[0]} of {jobs} completed, {done[1]} dead-lettered")
            expected = {"none": None, "json": JSON_RESULT, "bytes": BYTES_RESULT}[mode]
            got = client.result(results[-1].job_id, timeout=10)  # type: ignore[union-attr]
            if got != expected:
                raise RuntimeError(f"the last job's result is {got!r}, not {expected!r}")
        finally:
            _stop(procs)
            log.close()
    d = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return Run(jobs, t1 - t0, t2 - t1, d[0], sum(d[2:]), d[1])


def main() -> None:
    """Parse the flags, run the rounds, print the table."""
    from _harness import median, table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--n", type=int, default=20_000, help="jobs per run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each one run without and one with a result")
    ap.add_argument("--result", choices=("json", "bytes"), default="json",
                    help="json: a dict of 100 bytes of compact JSON; bytes: 100 raw bytes")
    ap.add_argument("--workers", type=int, default=2, help="worker processes")
    args = ap.parse_args()
    runs: dict[str, list[Run]] = {"none": [], args.result: []}
    with tempfile.TemporaryDirectory(prefix="sepp-results-cost-") as tmp:
        for r in range(args.rounds):
            order = ["none", args.result] if r % 2 == 0 else [args.result, "none"]
            for mode in order:
                folder = Path(tmp) / f"round-{r}-{mode}"
                folder.mkdir()
                run = one_run(folder, mode, args.n, args.workers)
                runs[mode].append(run)
                print(f"round {r + 1} {mode:>5}: {run.rate:,.0f} jobs/s (enqueue {run.enqueue_s:.2f} s, drain "
                      f"{run.drain_s:.2f} s), {run.cpu_us:.0f} µs/job", file=sys.stderr)
    label = {"none": "handlers return None",
             "json": "handlers return 100 bytes of JSON (a dict)",
             "bytes": "handlers return 100 bytes (bytes)"}
    rows = []
    for mode, got in runs.items():
        for name, values, fmt in (
                ("jobs/s", [g.rate for g in got], "{:,.0f}"),
                ("CPU µs/job", [g.cpu_us for g in got], "{:.1f}"),
                ("  of which server", [g.us(g.server_cpu) for g in got], "{:.1f}"),
                ("  of which workers", [g.us(g.workers_cpu) for g in got], "{:.1f}"),
                ("  of which producer", [g.us(g.producer_cpu) for g in got], "{:.1f}")):
            rows.append([f"{label[mode]}: {name}", fmt.format(median(values)),
                         ", ".join(fmt.format(v) for v in values)])
    base, res = runs["none"], runs[args.result]
    rate_ratio = median([g.rate for g in res]) / median([g.rate for g in base])
    cpu_ratio = median([g.cpu_us for g in base]) / median([g.cpu_us for g in res])
    rows.append(["ratio jobs/s, result ÷ none (target ≥ 0.9)", f"{rate_ratio:.3f}",
                 ", ".join(f"{r.rate / b.rate:.3f}" for b, r in zip(base, res, strict=True))])
    rows.append(["ratio CPU/job, none ÷ result (CPU-bound rate)", f"{cpu_ratio:.3f}",
                 ", ".join(f"{b.cpu_us / r.cpu_us:.3f}" for b, r in zip(base, res, strict=True))])
    print(f"N = {args.n:,} no-op jobs per run, SQLite group commit, Client.enqueue_many, {args.workers} x sepp "
          f"worker --concurrency 256 --prefetch 256; median of {args.rounds} round(s)")
    print(table(["figure", "median", "rounds"], rows))


if __name__ == "__main__":
    main()
