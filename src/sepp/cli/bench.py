"""``sepp bench``: a quick load test of a running server (SPEC §4).

Enqueues ``--jobs`` jobs (single calls or batches) with ``--concurrency`` calls in
flight through the Python ``AsyncClient``, then optionally drains them with a no-op
``Worker``, and prints throughput and ack latency. For the full, reproducible figures
see ``benchmarks/`` and docs/benchmarks.md; this command is for trying a deployment.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sepp.cli.main import app
from sepp.cli.shell import DEFAULT_SERVER, EXIT_TRANSPORT, ClientTokenOpt, ServerOpt, fail_auth


async def _enqueue(server: str, queue: str, jobs: int, batch: int, concurrency: int,
                   token: str | None = None) -> tuple[float, list[float]]:
    from sepp import AsyncClient, EnqueueRequest, Payload

    request = EnqueueRequest(queue, "bench", payload=Payload.json({"bench": True}))
    calls = (jobs + batch - 1) // batch
    latencies: list[float] = []
    next_call = 0
    async with AsyncClient(server, token=token or "") as client:
        await client.get_server_info()

        async def loop() -> None:
            nonlocal next_call
            while next_call < calls:
                n = min(batch, jobs - next_call * batch)
                next_call += 1
                started = time.perf_counter()
                if batch == 1:
                    await client.enqueue(request)
                else:
                    await client.enqueue_batch([request] * n)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


async def _drain(server: str, queue: str, jobs: int, token: str | None = None) -> float:
    from sepp import Job, Worker

    worker = Worker(server, [queue], concurrency=256, poll_wait=0.5, token=token or "")
    done = 0
    finished = asyncio.Event()

    @worker.handler("bench")
    async def noop(job: Job) -> None:
        nonlocal done
        done += 1
        if done >= jobs:
            finished.set()

    started = time.perf_counter()
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await finished.wait()
    elapsed = time.perf_counter() - started
    await worker.stop(5.0)
    await task
    return elapsed


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


@app.command()
def bench(
    server: ServerOpt = DEFAULT_SERVER,
    queue: Annotated[str, typer.Option(help="Queue to load (use a scratch queue).")] = "sepp-bench",
    jobs: Annotated[int, typer.Option(min=1, help="Jobs to enqueue.")] = 20_000,
    batch: Annotated[int, typer.Option(min=1, max=256, help="Jobs per call; 1 = single Enqueue.")] = 256,
    concurrency: Annotated[int, typer.Option(min=1, help="Calls in flight.")] = 4,
    drain: Annotated[bool, typer.Option("--drain/--no-drain", help="Then work them off with a no-op Worker.")] = True,
    token: ClientTokenOpt = None,
) -> None:
    """Load-test a running server: enqueue rate, ack latency, and (with --drain) work-off rate."""
    from sepp.errors import PermissionDenied, SeppError, Unauthenticated

    console = Console(highlight=False)
    try:
        with console.status(f"enqueueing {jobs:,} jobs…"):
            seconds, latencies = asyncio.run(_enqueue(server, queue, jobs, batch, concurrency, token))
        drained = None
        if drain:
            with console.status(f"working off {jobs:,} jobs…"):
                drained = asyncio.run(_drain(server, queue, jobs, token))
    except (Unauthenticated, PermissionDenied) as exc:  # issue 11: exit 2, fix the token (both roles needed)
        fail_auth(exc, False)
    except SeppError as exc:
        console.print(f"[red]bench failed:[/] {type(exc).__name__}: {exc}")
        raise typer.Exit(EXIT_TRANSPORT) from None
    table = Table("what", "value")
    table.add_row("enqueued", f"{jobs:,} jobs in {seconds:.2f} s = {jobs / seconds:,.0f} jobs/s")
    table.add_row("calls", f"{len(latencies):,} × {batch} job(s), {concurrency} in flight")
    table.add_row("ack latency p50 / p99", f"{_pct(latencies, 0.5):.2f} / {_pct(latencies, 0.99):.2f} ms")
    if drained is not None:
        table.add_row("worked off (no-op Worker)", f"{jobs:,} jobs in {drained:.2f} s = {jobs / drained:,.0f} jobs/s")
    console.print(table)
