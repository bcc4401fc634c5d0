"""Producer benchmark (issue 2): enqueue rates and ack latency per persist mode.

Starts real ``sepp serve`` processes (ServerProcess, uvloop) and, in the same run,
an empty grpc.aio unary server as the ceiling; drives both from this process with
grpc.aio + uvloop. Prints a Markdown table, then per mode the lone-producer ``Enqueue``
rate as a ratio to the empty call measured right before that mode (issue 15 item 2).

    python benchmarks/producer.py [--duration 5] [--modes sync,group,async] [--rss-jobs 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import grpc
import uvloop
from _harness import EchoServer, Result, empty_call, load, table

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.testing import ServerProcess

PAYLOAD = pb.Payload(data=b'{"user_id": 42, "template": "welcome", "locale": "en-US"}' + b" " * 140,
                     encoding="application/json")


def one_job() -> pb.EnqueueRequest:
    """A typical ~200-byte job."""
    return pb.EnqueueRequest(queue="bench", job_type="welcome", payload=PAYLOAD)


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` and its child processes (the writer process), MiB (/proc)."""
    total = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            total += int(line.split()[1]) / 1024
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        total += rss_mib(int(child))
    return total


async def measure_mode(target: str, duration: float) -> dict[str, Result]:
    """Single enqueue at 1 and 64 in flight, batches of 256 at 1 and 4 in flight."""
    out: dict[str, Result] = {}
    async with grpc.aio.insecure_channel(target) as channel:
        # Requests are serialized once and answers left as bytes, exactly like the empty-call
        # ceiling, so client-side protobuf work (same 2 cores) does not blur the comparison.
        single = one_job().SerializeToString()
        batch = ppb.EnqueueBatchRequest(jobs=[one_job() for _ in range(256)]).SerializeToString()
        enqueue = channel.unary_unary("/sepp.api.v1.ProducerService/Enqueue")
        enqueue_batch = channel.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch")
        assert pb.EnqueueAck.FromString(await enqueue(single)).job_id
        answer = ppb.EnqueueBatchResponse.FromString(await enqueue_batch(batch))
        assert len(answer.results) == 256 and all(r.ack.job_id for r in answer.results)
        out["single x1"] = await load(lambda: enqueue(single), 1, duration)
        out["single x64"] = await load(lambda: enqueue(single), 64, duration)
        out["batch256 x1"] = await load(lambda: enqueue_batch(batch), 1, duration, 256)
        out["batch256 x4"] = await load(lambda: enqueue_batch(batch), 4, duration, 256)
    return out


async def fill(target: str, jobs: int) -> None:
    """Store ``jobs`` jobs with 4 batches of 256 in flight."""
    async with grpc.aio.insecure_channel(target) as channel:
        enqueue_batch = channel.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch")
        batch = ppb.EnqueueBatchRequest(jobs=[one_job() for _ in range(256)]).SerializeToString()
        calls = (jobs + 255) // 256
        sem = asyncio.Semaphore(4)

        async def one() -> None:
            async with sem:
                await enqueue_batch(batch)

        await asyncio.gather(*(one() for _ in range(calls)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--modes", default="sync,group,async")
    parser.add_argument("--rss-jobs", type=int, default=1_000_000, help="0 skips the memory run")
    parser.add_argument("--writer", choices=("auto", "process", "thread"), default="auto",
                        help="sqlite_writer of the server (default: auto, the server's default)")
    args = parser.parse_args()

    with EchoServer() as echo:
        async with grpc.aio.insecure_channel(echo.target) as channel:
            call = empty_call(channel)
            ceiling1 = await load(call, 1, args.duration)
            ceiling64 = await load(call, 64, args.duration)
    rows = [["empty unary call (ceiling)", "-", f"{ceiling1.calls_per_s:,.0f}", f"{ceiling64.calls_per_s:,.0f}",
             "-", "-", f"{ceiling1.pct(0.5):.2f} / {ceiling1.pct(0.99):.2f}",
             f"{ceiling64.pct(0.5):.2f} / {ceiling64.pct(0.99):.2f}"]]
    ratios = []
    lone = []
    for mode in args.modes.split(","):
        # The lone-producer target (issue 15 item 2) is a ratio to the empty call measured in
        # the same minute: on shared cores, the load drifts between the start and the end.
        with EchoServer() as echo:
            async with grpc.aio.insecure_channel(echo.target) as channel:
                near = await load(empty_call(channel), 1, args.duration)
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), {"persist_mode": mode,
                                                                               "sqlite_writer": args.writer}) as server:
            r = await measure_mode(server.grpc_target, args.duration)
        lone.append(f"{mode}: lone-producer Enqueue {r['single x1'].calls_per_s:,.0f}/s = "
                    f"{r['single x1'].calls_per_s / near.calls_per_s:.2f} x the empty call measured just before "
                    f"({near.calls_per_s:,.0f}/s); target {0.85 if mode == 'async' else 0.75:.2f}")
        rows.append([f"sepp enqueue, {mode}", mode, f"{r['single x1'].calls_per_s:,.0f}",
                     f"{r['single x64'].calls_per_s:,.0f}", f"{r['batch256 x1'].items_per_s:,.0f}",
                     f"{r['batch256 x4'].items_per_s:,.0f}",
                     f"{r['single x1'].pct(0.5):.2f} / {r['single x1'].pct(0.99):.2f}",
                     f"{r['single x64'].pct(0.5):.2f} / {r['single x64'].pct(0.99):.2f}"])
        ratios.append(f"{mode}: 64-producer single enqueue = "
                      f"{r['single x64'].calls_per_s / ceiling64.calls_per_s:.0%} of the empty-call ceiling")
    print(table(["what", "mode", "single/s x1", "single/s x64", "batch jobs/s x1", "batch jobs/s x4",
                 "p50/p99 ms x1", "p50/p99 ms x64"], rows))
    print()
    for line in ratios + lone:
        print("-", line)
    if args.rss_jobs:
        config = {"persist_mode": "group", "sqlite_writer": args.writer}
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), config) as server:
            before = rss_mib(server.pid)
            await fill(server.grpc_target, args.rss_jobs)
            after = rss_mib(server.pid)
        print(f"- server RSS (with its writer process): {before:.0f} MiB at start, "
              f"{after:.0f} MiB after {args.rss_jobs:,} jobs stored")


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(main())
