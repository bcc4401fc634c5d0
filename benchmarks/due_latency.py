"""How late after its time a scheduled job reaches a long-polling worker (the 100 ms promise).

A due scheduled job must be reservable within 100 ms of its time. The tests check the
mechanism (the promotion timer wakes for the next due job, not the sweep; the promotion
wakes a parked long-poll) with bounds a loaded machine keeps; this script measures the
figure itself on a real ``sepp serve`` (SQLite, group mode) with a slow sweep (30 s), so
every promotion comes from the timer:

    python benchmarks/due_latency.py                 # 40 rounds
    python benchmarks/due_latency.py --rounds 100 --sweep-interval 0.05

Each round enqueues one job scheduled ``--ahead`` seconds out (0.2–0.8 s, varied), parks a
Reserve long-poll on its queue and records when the job arrives, against its scheduled time
(one machine, one clock). Prints a table of lateness percentiles in milliseconds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import tempfile
from pathlib import Path

import grpc
from _harness import table

from sepp import wire
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2, worker_pb2_grpc
from sepp.testing import ServerProcess


def now() -> dt.datetime:
    """The wall clock, UTC."""
    return dt.datetime.now(dt.UTC)


def measure(target: str, rounds: int, rng: random.Random) -> list[float]:
    """Lateness (seconds; negative = early) of ``rounds`` scheduled jobs, one at a time."""
    late: list[float] = []
    with grpc.insecure_channel(target) as channel:
        producer = producer_pb2_grpc.ProducerServiceStub(channel)
        worker = worker_pb2_grpc.WorkerServiceStub(channel)
        for _ in range(rounds):
            due = now() + dt.timedelta(seconds=rng.uniform(0.2, 0.8))
            req = pb.EnqueueRequest(queue="due", job_type="t", payload=pb.Payload(data=b""))
            req.scheduled_at.FromDatetime(due)
            producer.Enqueue(req, timeout=10)
            reserve = worker_pb2.ReserveRequest(queues=["due"], max_jobs=1, worker_id="bench",
                                                wait=wire.seconds_to_duration(5.0))
            got = worker.Reserve(reserve, timeout=15).reservations
            arrived = now()
            if len(got) != 1:
                raise SystemExit("a scheduled job did not arrive within the 5 s long-poll")
            late.append((arrived - due).total_seconds())
            worker.Ack(worker_pb2.AckRequest(job_id=got[0].job.id, lease_id=got[0].lease_id), timeout=10)
    return late


def main() -> None:
    """Parse flags, start a server, measure, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--sweep-interval", type=float, default=30.0, help="seconds between the server's sweeps")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sepp-due-") as folder:
        server = ServerProcess(Path(folder), {"sweep_interval": args.sweep_interval}).start()
        try:
            late = sorted(measure(server.grpc_target, args.rounds, random.Random(args.seed)))
        finally:
            server.terminate()

    def pct(q: float) -> str:
        return f"{late[min(len(late) - 1, int(q * len(late)))] * 1000:.1f}"

    print(table(["rounds", "p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms", "within 100 ms"],
                [[str(len(late)), pct(0.5), pct(0.9), pct(0.99), f"{late[-1] * 1000:.1f}",
                  f"{statistics.fmean(late) * 1000:.1f}", f"{sum(x <= 0.1 for x in late)}/{len(late)}"]]))


if __name__ == "__main__":
    main()
