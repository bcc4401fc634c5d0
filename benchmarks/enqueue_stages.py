"""Batched enqueue, stage by stage, in one process: CPU µs per job of each stage (issue 10,
issue 15 item 3), steadier than ``enqueue_cost.py`` on a shared machine (no gRPC, no
second process, nothing waits) and runnable on any sepp tree (PYTHONPATH), so one sitting
compares two commits.

Batches of 256 ``{"i": n}`` JSON jobs, as the peer harness sends them:

* client build: ``EnqueueRequest(...)`` + ``Payload.json(...)`` per job (the user's code);
* client call: ``Client.enqueue_batch`` of those requests, its gRPC call answered in-process
  with the server's serialized answer (local validation, the batch message, serializing it,
  reading the answer);
* server: the request parsed from bytes, ``ProducerServicer.EnqueueBatch`` over an engine
  whose store answers at once, the answer serialized as gRPC would (validation, rows,
  events, answer) — for the batch as the Python client sends it (plain jobs by column,
  ``EnqueueBatchRequest.plain``) and as ``EnqueueRequest`` messages (``jobs``: any other
  client, or jobs with more than queue, type and payload set);
* SQLite writer: the batch's INSERT statements built (``insert_statements``, on the event
  loop in the server) and run and committed on a real database file (``synchronous=OFF``:
  the CPU of the writer's statements, without the fsync).

Each stage runs ``--rounds`` batches in a row, ``--repeat`` times; the table shows the
fastest repeat (process time, so time other processes take is not counted).

    python benchmarks/enqueue_stages.py [--rounds 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import table
from client_cost import _info, _stubbed_client

from sepp import EnqueueRequest, Payload
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _core
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry
from sepp.server.rpc.producer import ProducerServicer
from sepp.storage.sqlite import ops
from sepp.storage.sqlite.sql import insert_statements

BATCH = 256


class _NullStore:
    """A store that stores nothing and answers at once (the server stage without storage)."""

    backlog = 0

    def on_promoted(self, _callback: Any) -> None:
        pass

    async def enqueue(self, *_: Any) -> dict[int, Any]:
        return {}


def _requests(start: int) -> list[EnqueueRequest]:
    return [EnqueueRequest("bench", "noop", payload=Payload.json({"i": i})) for i in range(start, start + BATCH)]


def _cpu(fn: Callable[[int], object], rounds: int, repeat: int) -> float:
    """Fastest of ``repeat`` runs of ``rounds`` calls ``fn(round)``: CPU µs per job."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for r in range(rounds):
            fn(r)
        best = min(best, time.process_time() - t)
    return best / rounds / BATCH * 1e6


def main() -> None:
    """Parse the flags, time each stage, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    config = ServerConfig()
    registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes)
    parts = ServerParts.build(config, _NullStore(), registry, Notifier())  # type: ignore[arg-type]
    engine = JobEngine(parts)
    servicer = ProducerServicer(parts, engine, 0.0, "bench")
    body = ppb.EnqueueBatchRequest(jobs=[r.to_proto() for r in _requests(0)]).SerializeToString()
    cached = _info()
    plain_body = _core.lean_batch(cached, _requests(0)) if cached.plain_wire else None

    def serve(_: int, body: bytes = body) -> bytes:
        coro = servicer.EnqueueBatch(ppb.EnqueueBatchRequest.FromString(body), None)
        try:
            coro.send(None)
        except StopIteration as stop:
            answer = stop.value
        else:
            raise RuntimeError("the null store awaited")
        return answer if type(answer) is bytes else answer.SerializeToString()

    answer = serve(0)
    client = _stubbed_client(cached, answer, None)
    built = [_requests(r * BATCH) for r in range(args.rounds)]

    folder = Path(tempfile.mkdtemp(prefix="sepp-stages-"))

    async def schema() -> None:
        from sepp.storage.factory import open_store

        store = open_store(ServerConfig(data_dir=folder))
        await store.open()
        await store.close()

    asyncio.run(schema())
    conn = sqlite3.connect(next(folder.glob("*.db")), isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    rows_per_round: list[Any] = []

    class _Capture(_NullStore):
        async def enqueue(self, rows: Any, *_: Any) -> dict[int, Any]:
            rows_per_round.append(list(rows))
            return {}

    engine.admission.store = _Capture()  # type: ignore[assignment]
    for _ in range(args.rounds * args.repeat):  # fresh ids for every write
        coro = engine.enqueue_batch(ppb.EnqueueBatchRequest.FromString(body).jobs)
        try:
            coro.send(None)
        except StopIteration:
            pass
    engine.admission.store = _NullStore()  # type: ignore[assignment]

    fresh = iter(rows_per_round)

    def write(_: int) -> None:
        conn.execute("BEGIN")
        ops.run_inserts(insert_statements(next(fresh)), conn)
        conn.execute("COMMIT")

    stages = [("client: build EnqueueRequest + Payload.json (user code)", lambda r: _requests(r * BATCH)),
              ("client: Client.enqueue_batch, no network", lambda r: client.enqueue_batch(built[r])),
              ("server: parse, EnqueueBatch (engine, null store), serialize answer", serve),
              *([("server: the same, the jobs by column (EnqueueBatchRequest.plain)",
                  lambda r: serve(r, plain_body))] if plain_body is not None else []),
              ("SQLite writer: insert_statements + INSERTs + COMMIT (synchronous=OFF)", write)]
    rows: list[list[str]] = []
    total = 0.0
    for name, fn in stages:
        us = _cpu(fn, args.rounds, args.repeat)
        if "by column" in name:  # the client sends this form: it replaces the row above in the sum
            total -= float(rows[-1][1])
        total += us
        rows.append([name, f"{us:.2f}"])
    rows.append(["sum", f"{total:.2f}"])
    print(table([f"stage (batch of {BATCH}, fastest of {args.repeat} × {args.rounds})", "CPU µs/job"], rows))


if __name__ == "__main__":
    main()
