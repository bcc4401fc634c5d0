"""The Rust client beside the Python client and the lone-request floor, in one run.

On one fresh ``sepp serve`` (group mode, SQLite) per round, one producer at a time, one call
at a time:

* ``floor`` — a bare grpc.aio ``Enqueue`` of a serialized ~200-byte job (``lone_floor.py``'s
  ``sepp group`` row: what the server sustains for a lone producer with no client code);
* ``python lone`` / ``rust lone`` — the same job through ``sepp.AsyncClient.enqueue`` and
  ``sepp_rs::Client::enqueue`` (local validation on, as users run them);
* ``batch floor`` — a bare grpc.aio ``EnqueueBatch`` of 256 no-op jobs in a loop: the very
  bytes the Python client sends for that batch (plain jobs by column, ``PlainJobs``, to a
  server advertising ``enqueue_batch_plain``), taken from the client's own writer once and
  sent as they are — no client-side cost at all, so what one producer calling one batch at
  a time can get from the server, whatever its language (grpc-python's own per-call cost,
  a fraction of a millisecond against a batch's milliseconds, aside);
* ``batch floor h2`` — the same bytes (checked) sent by the Rust client's bare h2 channel
  (bench.rs ``floor``): the floor on the lighter transport;
* ``python batch`` / ``rust batch`` — ``enqueue_batch`` of 256 no-op jobs in a loop (both
  clients send them as one ``PlainJobs`` run; the Python client's bytes are checked to be
  the canonical encoding, which is what prost writes for the same message).

The Rust side is clients/rust/examples/bench.rs, built in release mode first. Rounds are
interleaved; the table shows medians and the ratios the Rust client is held to: its lone
rate over the floor, its batch rate over the Python client's — and each batch row over the
batch floor: when the Python client already gets more than 1/1.5 of the floor, no client
calling one batch at a time can reach 1.5 × the Python client (docs/benchmarks.md).

    python benchmarks/rust_client.py [--duration 5] [--rounds 3] [--batch-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import grpc
import uvloop
from _harness import load, table
from lone_floor import measure_sepp

from sepp import AsyncClient, EnqueueRequest, Payload
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _info
from sepp.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
CRATE = ROOT / "clients" / "rust"
PAYLOAD = Payload(b'{"user_id": 42, "template": "welcome", "locale": "en-US"}' + b" " * 140, "application/json")
ROWS = ("floor", "python lone", "rust lone", "batch floor", "batch floor h2", "python batch", "rust batch")
BATCH_ROWS = ROWS[3:]
#: The batch of the batch rows: 256 no-op jobs (queue and job type only).
BATCH = [EnqueueRequest("bench", "noop")] * 256
ENQUEUE_BATCH = "/sepp.api.v1.ProducerService/EnqueueBatch"


def build() -> Path:
    """Build the Rust bench example (release) and return its path."""
    env = {**os.environ, "CARGO_TARGET_DIR": str(CRATE / "target")}
    subprocess.run(["cargo", "build", "--offline", "--release", "--example", "bench"], cwd=CRATE, env=env, check=True)
    return CRATE / "target" / "release" / "examples" / "bench"


async def python_rate(target: str, mode: str, duration: float) -> float:
    """Jobs/s of the Python client: lone ``enqueue`` or ``enqueue_batch`` of 256 no-op jobs."""
    async with AsyncClient(target) as client:
        if mode == "lone":
            request = EnqueueRequest("bench", "welcome", payload=PAYLOAD)
            result = await load(lambda: client.enqueue(request), 1, duration)
        else:
            result = await load(lambda: client.enqueue_batch(BATCH), 1, duration, len(BATCH))
    return result.items_per_s


async def batch_wire(target: str) -> bytes:
    """The serialized ``EnqueueBatchRequest`` the Python client sends for ``BATCH`` to the
    server at ``target`` (its own writer, ``_info.lean_batch``, with the server's info).

    Raises ``RuntimeError`` when the client would not take its lean path (a job it refuses
    locally) or the bytes are not plain jobs by column (a server without ``enqueue_batch_plain``).
    """
    async with AsyncClient(target) as client:
        wire = _info.lean_batch(await client._cached_info(), BATCH)
    if wire is None:
        raise RuntimeError("the Python client would not send the benchmark batch on its lean path")
    message = ppb.EnqueueBatchRequest.FromString(wire)
    if message.jobs or sum(len(run.data) for run in message.plain) != len(BATCH):
        raise RuntimeError("the Python client's batch is not plain jobs by column (PlainJobs)")
    if wire != message.SerializeToString():
        raise RuntimeError("the Python client's batch bytes are not the canonical encoding of their message")
    return wire


async def batch_floor_rate(target: str, duration: float) -> float:
    """Jobs/s of a bare grpc.aio stub sending the Python client's ``BATCH`` bytes (prepared
    once, ``batch_wire``) in a loop, one call at a time, the answer left undecoded."""
    wire = await batch_wire(target)
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(ENQUEUE_BATCH)
        first = ppb.EnqueueBatchResponse.FromString(await call(wire))
        if len(first.results) != len(BATCH) or any(not r.HasField("ack") for r in first.results):
            raise RuntimeError("the server did not store every job of the benchmark batch")
        result = await load(lambda: call(wire), 1, duration, len(BATCH))
    return result.items_per_s


def check_rust_wire(binary: Path, target: str) -> None:
    """Raise ``RuntimeError`` unless the Rust floor's bytes are the Python client's (``batch_wire``)."""
    out = subprocess.run([str(binary), f"http://{target}", "wire"], capture_output=True, text=True, check=True,
                         timeout=60)
    if bytes.fromhex(out.stdout.strip()) != uvloop.run(batch_wire(target)):
        raise RuntimeError("the Rust batch floor does not send the Python client's bytes")


def rust_rate(binary: Path, target: str, mode: str, duration: float) -> float:
    """Jobs/s of the Rust client (the bench example in a process of its own)."""
    out = subprocess.run([str(binary), f"http://{target}", mode, str(duration), "1"], capture_output=True, text=True,
                         check=True, timeout=duration + 60)
    return float(out.stdout.split()[0])


def measure(row: str, binary: Path, target: str, duration: float) -> float:
    """Jobs/s of ``row`` (one of ``ROWS``) against the server at ``target``."""
    if row == "floor":
        return uvloop.run(measure_sepp(target, duration))
    if row == "batch floor":
        return uvloop.run(batch_floor_rate(target, duration))
    if row == "batch floor h2":
        return rust_rate(binary, target, "floor", duration)
    client, mode = row.split()
    if client == "python":
        return uvloop.run(python_rate(target, mode, duration))
    return rust_rate(binary, target, mode, duration)


def main() -> None:
    """Parse the flags, build, run the rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-only", action="store_true", help="the batch rows only")
    args = parser.parse_args()
    binary = build()
    names = BATCH_ROWS if args.batch_only else ROWS
    rates: dict[str, list[float]] = {row: [] for row in names}
    for turn in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), {"persist_mode": "group"}) as server:
            if turn == 0:
                check_rust_wire(binary, server.grpc_target)
            # The lone rows, then the batch rows, each group in an order rotated every round
            # (the database grows through a round: no row always runs on the emptiest one).
            for group in (ROWS[:3], BATCH_ROWS):
                present = [row for row in group if row in names]
                if not present:
                    continue
                for row in present[turn % len(present):] + present[:turn % len(present)]:
                    rates[row].append(measure(row, binary, server.grpc_target, args.duration))
    med = {row: statistics.median(values) for row, values in rates.items()}
    floor = max(med["batch floor"], med["batch floor h2"])  # the higher of the two transports' floors
    rows = [[row, f"{med[row]:,.0f}",
             f"{len(BATCH) / med[row] * 1000:.2f}" if row in BATCH_ROWS else "",
             f"{med[row] / floor:.2f}" if row in BATCH_ROWS else "",
             ", ".join(f"{v:,.0f}" for v in rates[row])] for row in names]
    print(table(["producer (one call at a time)", "jobs/s (median)", "ms per batch", "/ higher batch floor",
                 "per round"], rows))
    if not args.batch_only:
        print(f"\nrust lone / floor: {med['rust lone'] / med['floor']:.2f} (target ≥ 0.95)")
    # The same ratio round by round (rows of one round run seconds apart, on one server): on
    # a loaded machine the rounds swing together, so paired ratios are the steadier figure.
    paired = statistics.median(p / max(f, h) for p, f, h in
                               zip(rates["python batch"], rates["batch floor"], rates["batch floor h2"], strict=True))
    python_share = med["python batch"] / floor
    print(f"rust batch / python batch: {med['rust batch'] / med['python batch']:.2f} (target ≥ 1.5); "
          f"python batch / the higher batch floor: {python_share:.2f} of medians, {paired:.2f} paired by round "
          f"— 1.5 × python batch is {1.5 * python_share:.2f} × that floor, "
          + ("above it: out of reach of any client calling one batch at a time" if 1.5 * python_share > 1
             else "within it: reachable in principle"))
    print(f"{args.rounds} rounds of {args.duration:g} s per row; load average {os.getloadavg()[0]:.2f}; "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
