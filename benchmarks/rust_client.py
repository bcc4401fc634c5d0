"""The Rust client beside the Python client and the lone-request floor, in one run.

On one fresh ``sepp serve`` (group mode, SQLite) per round, one producer at a time, one call
at a time:

* ``floor`` — a bare grpc.aio ``Enqueue`` of a serialized ~200-byte job (``lone_floor.py``'s
  ``sepp group`` row: what the server sustains for a lone producer with no client code);
* ``python lone`` / ``rust lone`` — the same job through ``sepp.AsyncClient.enqueue`` and
  ``sepp_rs::Client::enqueue`` (local validation on, as users run them);
* ``python batch`` / ``rust batch`` — ``enqueue_batch`` of 256 no-op jobs in a loop.

The Rust side is clients/rust/examples/bench.rs, built in release mode first. Rounds are
interleaved; the table shows medians and the two ratios the Rust client is held to: its lone
rate over the floor, its batch rate over the Python client's.

    python benchmarks/rust_client.py [--duration 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import uvloop
from _harness import load, table
from lone_floor import measure_sepp

from sepp import AsyncClient, EnqueueRequest, Payload
from sepp.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
CRATE = ROOT / "clients" / "rust"
PAYLOAD = Payload(b'{"user_id": 42, "template": "welcome", "locale": "en-US"}' + b" " * 140, "application/json")
ROWS = ("floor", "python lone", "rust lone", "python batch", "rust batch")


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
            batch = [EnqueueRequest("bench", "noop")] * 256
            result = await load(lambda: client.enqueue_batch(batch), 1, duration, 256)
    return result.items_per_s


def rust_rate(binary: Path, target: str, mode: str, duration: float) -> float:
    """Jobs/s of the Rust client (the bench example in a process of its own)."""
    out = subprocess.run([str(binary), f"http://{target}", mode, str(duration), "1"], capture_output=True, text=True,
                         check=True, timeout=duration + 60)
    return float(out.stdout.split()[0])


def main() -> None:
    """Parse the flags, build, run the rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binary = build()
    rates: dict[str, list[float]] = {row: [] for row in ROWS}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), {"persist_mode": "group"}) as server:
            target = server.grpc_target
            rates["floor"].append(uvloop.run(measure_sepp(target, args.duration)))
            rates["python lone"].append(uvloop.run(python_rate(target, "lone", args.duration)))
            rates["rust lone"].append(rust_rate(binary, target, "lone", args.duration))
            rates["python batch"].append(uvloop.run(python_rate(target, "batch", args.duration)))
            rates["rust batch"].append(rust_rate(binary, target, "batch", args.duration))
    med = {row: statistics.median(values) for row, values in rates.items()}
    rows = [[row, f"{med[row]:,.0f}", ", ".join(f"{v:,.0f}" for v in rates[row])] for row in ROWS]
    print(table(["producer (one call at a time)", "jobs/s (median)", "per round"], rows))
    print(f"\nrust lone / floor: {med['rust lone'] / med['floor']:.2f} (target ≥ 0.95); "
          f"rust batch / python batch: {med['rust batch'] / med['python batch']:.2f} (target ≥ 1.5)")
    print(f"{args.rounds} rounds of {args.duration:g} s per row; load average {os.getloadavg()[0]:.2f}; "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
