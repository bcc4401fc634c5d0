"""What storing a job's result costs the server alone: Reserve/Settle loops over raw gRPC
(no worker processes, no handler machinery), acks without a result and acks with a
100-byte JSON result, run in alternation; CPU µs per job of the server's main process and
of its SQLite writer child, each apart.

``results_cost.py`` times the whole path (producer, two worker processes, server); its
server figure spreads by ±15 µs/job between rounds on a busy machine, and the workers
share the two cores with it. Here the only other process is this driver, so the server's
two processes are measured more steadily, and apart: what the main process adds (the
Settle servicer's item path, the pickle to the writer) and what the writer adds (SQLite
writing 120 bytes more a row).

One run: a fresh ``sepp serve`` (ServerProcess: SQLite, ``persist_mode = "group"``), N
jobs enqueued (``Client.enqueue_many``, outside the measured window), then ``--loops``
asyncio tasks each repeat Reserve(256) → Settle of the jobs reserved until all N are
settled. The acks are built by the Worker's own code (``Settler._request``, the
``Outcome`` of ``returned()``), so the wire bytes are the worker's. CPU from ``/proc``
(the main process alone, and its children) between the first Reserve and the last answer.
Each round runs both rows, each on a fresh server, the order swapped every round (ABBA).

    python benchmarks/results_server.py [--n 20000] [--rounds 4] [--loops 4]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: The handler's return value of the result row: a dict of exactly 100 bytes of compact JSON
#: (``results_cost.py``'s).
RECORD: dict[str, Any] = {"status": "sent", "user_id": 42, "message_id": "m" * 54}
QUEUE = "bench"


def _cpu_split(pid: int) -> tuple[float, float]:
    """CPU seconds of process ``pid`` alone and of its children (their trees)."""
    from _harness import tree_cpu

    total = tree_cpu(pid)
    try:
        kids = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        kids = []
    children = sum(tree_cpu(k) for k in kids)
    return total - children, children


async def _drain(target: str, mode: str, jobs: int, loops: int) -> None:
    """Reserve and settle ``jobs`` jobs from ``loops`` tasks over one channel."""
    import grpc

    from sepp.api.v1 import worker_pb2 as wpb
    from sepp.api.v1 import worker_pb2_grpc
    from sepp.worker._settler import Settler
    from sepp.worker.outcome import COMPLETED, returned

    channel = grpc.aio.insecure_channel(target)
    stub = worker_pb2_grpc.WorkerServiceStub(channel)
    done = 0

    async def loop() -> None:
        nonlocal done
        while done < jobs:
            resp = await stub.Reserve(wpb.ReserveRequest(queues=[QUEUE], max_jobs=256, worker_id="bench"))
            if not resp.reservations:
                await asyncio.sleep(0.001)
                continue
            batch = [(COMPLETED if mode == "none" else returned(RECORD, 1 << 20), r.job.id, r.lease_id, None, None)
                     for r in resp.reservations]
            request = Settler._request(batch)  # type: ignore[arg-type]
            request.worker_id = "bench"
            answer = await stub.Settle(request)
            if any(not r.ok for r in answer.results):
                raise RuntimeError(f"a settle failed: {answer.results[0]}")
            done += len(batch)

    try:
        await asyncio.gather(*(loop() for _ in range(loops)))
    finally:
        await channel.close()


def one_run(folder: Path, mode: str, jobs: int, loops: int) -> tuple[float, float, float]:
    """(main µs/job, writer µs/job, jobs/s) of one fresh server draining ``jobs`` jobs."""
    from sepp import Client, EnqueueRequest, Payload
    from sepp.client.admin import AdminClient
    from sepp.testing import ServerProcess

    with ServerProcess(folder, {"persist_mode": "group", "log_level": "warning"}) as server, \
            Client(server.grpc_target) as client, AdminClient(server.grpc_target) as admin:
        admin.declare_queue(QUEUE)
        client.enqueue_many(EnqueueRequest(QUEUE, "noop", payload=Payload.json({"i": i})) for i in range(jobs))
        main0, writer0 = _cpu_split(server.pid)
        t0 = time.perf_counter()
        asyncio.run(_drain(server.grpc_target, mode, jobs, loops))
        elapsed = time.perf_counter() - t0
        main1, writer1 = _cpu_split(server.pid)
    return (main1 - main0) / jobs * 1e6, (writer1 - writer0) / jobs * 1e6, jobs / elapsed


def main() -> None:
    """Parse the flags, run the rounds, print the table."""
    from _harness import median, table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--n", type=int, default=20_000, help="jobs per run")
    ap.add_argument("--rounds", type=int, default=4, help="rounds, each one run without and one with a result")
    ap.add_argument("--loops", type=int, default=4, help="Reserve/Settle tasks side by side")
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {"none": [], "json": []}
    with tempfile.TemporaryDirectory(prefix="sepp-results-server-") as tmp:
        for r in range(args.rounds):
            for mode in (["none", "json"] if r % 2 == 0 else ["json", "none"]):
                run = one_run(Path(tmp) / f"{r}-{mode}", mode, args.n, args.loops)
                runs[mode].append(run)
                print(f"round {r + 1} {mode:>4}: main {run[0]:.1f} + writer {run[1]:.1f} µs/job, {run[2]:,.0f} jobs/s",
                      file=sys.stderr)
    label = {"none": "acks without a result", "json": "acks with 100 bytes of JSON"}
    rows = []
    for mode, got in runs.items():
        for name, values, fmt in (("server CPU µs/job", [m + w for m, w, _ in got], "{:.1f}"),
                                  ("  of which main process", [m for m, _, _ in got], "{:.1f}"),
                                  ("  of which writer process", [w for _, w, _ in got], "{:.1f}"),
                                  ("jobs/s", [j for _, _, j in got], "{:,.0f}")):
            rows.append([f"{label[mode]}: {name}", fmt.format(median(values)),
                         ", ".join(fmt.format(v) for v in values)])
    base, res = runs["none"], runs["json"]
    rows.append(["result's extra server CPU µs/job (median of rounds)",
                 f"{median([(r[0] + r[1]) - (b[0] + b[1]) for b, r in zip(base, res, strict=True)]):.1f}",
                 ", ".join(f"{(r[0] + r[1]) - (b[0] + b[1]):+.1f}" for b, r in zip(base, res, strict=True))])
    print(f"N = {args.n:,} jobs per run, SQLite group commit, {args.loops} Reserve(256)/Settle loops over raw gRPC; "
          f"median of {args.rounds} round(s)")
    print(table(["figure", "median", "rounds"], rows))


if __name__ == "__main__":
    main()
