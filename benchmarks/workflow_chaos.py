"""Chords under ``kill -9``: the full chaos run of ``tests/support/workflow_chaos.py``
(what is checked is written there and in docs/workflows.md "Crashes").

Each round sends ``--chords`` chords of ``--children`` no-op children and one callback
concurrently, workers dead-letter one child of every 4th chord and retry every 10th child
once, a server is SIGKILLed at a random point (on PostgreSQL one of ``--nodes`` nodes on one
schema, in turn) and restarted, and the round is checked once every callback is COMPLETED or
CANCELLED. Prints one line per round, then a table; exits 1 when any rule was broken.

    python benchmarks/workflow_chaos.py [--rounds 50] [--backend sqlite|postgres]
        [--chords 20] [--children 50] [--nodes 2] [--seed N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _harness import table
from support.workflow_chaos import run_chaos


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--chords", type=int, default=20)
    ap.add_argument("--children", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=0, help="PostgreSQL nodes on one schema (default 2)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sepp-wf-chaos-") as tmp:
        results = run_chaos(args.backend, Path(tmp), args.rounds, chords=args.chords, children=args.children,
                            nodes=args.nodes or None, seed=args.seed, progress=True)
    stamped = [t for r in results for t in r.stamped_early]
    problems = [f"round {i + 1}: {msg}" for i, r in enumerate(results) for msg in r.problems]
    rows = [
        ["rounds (one kill -9 each)", f"{len(results)}"],
        ["callbacks COMPLETED", f"{sum(r.completed for r in results):,}"],
        ["callbacks CANCELLED for a named failed child", f"{sum(r.cancelled for r in results):,}"],
        ["callbacks run again after a kill cut their run", f"{sum(r.reruns for r in results):,}"],
        ["children dead-lettered beyond the planned ones", f"{sum(r.unplanned_dead for r in results):,}"],
        ["jobs left DEFERRED", f"{sum(r.deferred_left for r in results):,}"],
        ["callback starts whose store check found the server away", f"{sum(r.unchecked for r in results):,}"],
        ["attempts stamped before the last child's finished_at (not a breach)",
         f"{len(stamped):,} (max {max(stamped, default=0) * 1000:.1f} ms)"],
        ["rule breaches", f"{len(problems):,}"],
        ["median seconds per round", f"{statistics.median(r.seconds for r in results):.1f}"],
        ["median seconds a killed server was away", f"{statistics.median(r.away for r in results):.1f}"],
    ]
    print(f"{args.backend}, {args.chords} chords x {args.children} children per round")
    print(table(["", "total"], rows))
    for msg in problems[:20]:
        print(msg)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
