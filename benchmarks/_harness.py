"""Shared benchmark plumbing: an empty-call gRPC server (the ceiling), load loops, tables.

Benchmarks are scripts, not tests: they print a table and the figures go to
docs/benchmarks.md with the command that produced them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc


def _identity(data: bytes) -> bytes:
    return data


def _echo_server(port_q: multiprocessing.Queue, work: Callable[[], Callable[[], None]] | None = None,  # type: ignore[type-arg]
                 ) -> None:
    """A grpc.aio server (uvloop, like sepp) whose only method returns an empty message.
    ``work`` (picklable), when given, is called once in the child; what it returns runs on
    the event loop before each answer (``benchmarks/lone_floor.py``: the storage floors)."""
    import uvloop

    act = work() if work is not None else None

    async def main() -> None:
        async def empty(_request: bytes, _context: grpc.aio.ServicerContext) -> bytes:  # type: ignore[type-arg]
            if act is not None:
                act()
            return b""

        handler = grpc.method_handlers_generic_handler("bench.Echo", {
            "Empty": grpc.unary_unary_rpc_method_handler(empty, _identity, _identity)})
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_q.put(port)
        await server.wait_for_termination()

    uvloop.install()
    asyncio.run(main())


class EchoServer:
    """Runs ``_echo_server`` in a child process; ``target`` once started. ``work``: see
    ``_echo_server``."""

    def __init__(self, work: Callable[[], Callable[[], None]] | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._q: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
        self._proc = ctx.Process(target=_echo_server, args=(self._q, work), daemon=True)
        self.target = ""

    def __enter__(self) -> EchoServer:
        self._proc.start()
        self.target = f"127.0.0.1:{self._q.get(timeout=20)}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.kill()
        self._proc.join()


def empty_call(channel: grpc.aio.Channel) -> Callable[[], Awaitable[bytes]]:
    """A callable doing one empty unary call on ``channel``."""
    method = channel.unary_unary("/bench.Echo/Empty", request_serializer=_identity, response_deserializer=_identity)
    return lambda: method(b"")


@dataclass
class Result:
    """One measured row: calls/s, items/s and latency percentiles (ms)."""

    calls: int
    items: int
    seconds: float
    latencies: list[float]

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.seconds

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))] * 1000


async def load(call: Callable[[], Awaitable[object]], concurrency: int, duration: float, items_per_call: int = 1,
               warmup: float = 1.0) -> Result:
    """Run ``call`` from ``concurrency`` tasks for ``warmup + duration`` s; measure the last ``duration``."""
    start = time.perf_counter()
    t0 = start + warmup
    end = t0 + duration
    lat: list[float] = []
    calls = 0

    async def worker() -> None:
        nonlocal calls
        while True:
            s = time.perf_counter()
            if s >= end:
                return
            await call()
            e = time.perf_counter()
            if s >= t0 and e <= end:
                lat.append(e - s)
                calls += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Result(calls, calls * items_per_call, duration, lat)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join([line, sep, *body])


def median(values: list[float]) -> float:
    """Median of ``values``."""
    return statistics.median(values)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its children (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, IndexError, ValueError):
            continue
    return total
