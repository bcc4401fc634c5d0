"""What one live job event costs the server, stage by stage, in process (no gRPC, no store):
CPU µs per event of building a commit's events and handing them to one watcher
(``JobEvents.enqueued`` / ``reserved`` / ``settled`` of 256 jobs each, as a busy node makes
them), and of writing the stream message (``encode_events``; ``events_message`` +
``SerializeToString``, the message object it replaced, for reference) — for a watcher of
every event and one filtered by queue (what ``watch_cost.py``'s watcher asks).

CPU time (``time.process_time``), the best of ``--repeat`` runs: on a loaded machine the
best run is the steadiest figure of the work itself.

    python benchmarks/watch_stages.py [--jobs 256] [--rounds 50] [--repeat 20]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from _harness import table

from sepp.domain.clock import FakeClock
from sepp.domain.params import SettleKind, SettleParams, SettleResult
from sepp.domain.records import JobRow
from sepp.server.job_events import JobEvent, JobEvents
from sepp.server.rpc.watch import encode_events, events_message

QUEUE = "bench"


def commit_events(jobs: int) -> Callable[[JobEvents], None]:
    """A function making the events of ``jobs`` jobs enqueued, reserved and acked (three
    commits' worth) on a hub."""
    rows = [JobRow(os.urandom(16), QUEUE, "noop", 2, 0, 1_000, 1_000, 3, b"", "", None, None) for _ in range(jobs)]
    # JobRecord fields the reserved emitter reads: id, queue, job type, attempt (7), started_at (16).
    records = [(r[0], QUEUE, "noop", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 5_000) for r in rows]
    acks = [SettleParams(r[0], os.urandom(16), SettleKind.ACK, 9_000) for r in rows]
    results = [SettleResult(None, 4, 9_000, 1, QUEUE, 5_000, "noop") for _ in rows]

    def make(hub: JobEvents) -> None:
        hub.enqueued(rows, {})
        hub.reserved(records, "w")  # type: ignore[arg-type]
        hub.settled(acks, results)

    return make


def best(fn: Callable[[], int], rounds: int, repeat: int) -> float:
    """Least CPU µs per event of ``rounds`` calls of ``fn`` (which returns its events) over ``repeat`` runs."""
    out = float("inf")
    for _ in range(repeat):
        t0, n = time.process_time(), 0
        for _ in range(rounds):
            n += fn()
        out = min(out, (time.process_time() - t0) / n * 1e6)
    return out


def main(args: argparse.Namespace) -> None:
    make = commit_events(args.jobs)
    rows = []
    for label, queues in (("every event", ()), (f"queue {QUEUE!r}", (QUEUE,))):
        hub = JobEvents("n1", FakeClock())
        watcher = hub.watch(queues=queues)

        def build() -> int:
            make(hub)  # noqa: B023 - run at once, in this loop's iteration
            return len(watcher.take())  # noqa: B023

        make(hub)
        events: list[JobEvent] = watcher.take()
        build_us = best(build, args.rounds, args.repeat)
        encode_us = best(lambda: len(encode_events(events)) and len(events), args.rounds, args.repeat)  # noqa: B023
        old_us = best(lambda: len(events_message(events).SerializeToString()) and len(events),  # noqa: B023
                      args.rounds, args.repeat)
        rows.append([label, f"{build_us:.2f}", f"{encode_us:.2f}", f"{old_us:.2f}",
                     f"{build_us + encode_us:.2f}", f"{3 * (build_us + encode_us):.1f}"])
    print(table(["watcher", "build + hand over", "encode_events", "(message object)", "µs/event", "µs/job (3 events)"],
                rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=20)
    main(parser.parse_args())
