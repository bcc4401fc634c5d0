"""Deep fuzz run (issue 14, item 6): N seconds of fuzzed requests over every RPC.

Starts one real ``sepp serve`` (ServerProcess, ``support.fuzz.SERVER_CONFIG``), seeds
it with jobs in every state (again every ``--reseed`` seconds; the seeded queues' settings
are set back every ``--reset`` seconds) and sends structurally
valid requests with extreme values (``support.fuzz.Requests``) to every RPC of every
service, with ``--concurrency`` calls in flight. Hypothesis generates the requests, one
round of ``--round`` examples per seed (``--seed``, then +1, …), so a run is reproducible
up to the server's own ids and clock. Prints Markdown tables: requests and rate, statuses
by code and by ErrorInfo reason, calls per RPC, every UNKNOWN/INTERNAL (and any other
answer that breaks ``fuzz.judge``'s contract) by class with one request each as
text-format proto (truncated), and the peak RSS (VmHWM) of the server and its writer.

Exit status 1 when any answer was UNKNOWN or INTERNAL or the server stopped serving
(with ``--strict``: any contract break).

    python benchmarks/fuzz.py --seconds 600 [--concurrency 4] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from _harness import table
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from sepp.testing import ServerProcess

# The fuzzer is a test helper (tests/support/fuzz), not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import fuzz


@dataclass
class Tally:
    """Counts of one run (thread-safe through ``lock``); one example request per failure class."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    codes: Counter[str] = field(default_factory=Counter)
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)
    ok: Counter[str] = field(default_factory=Counter)
    answers: dict[str, Counter[str]] = field(default_factory=dict)
    broken: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    examples: dict[tuple[str, str, str, str], tuple[fuzz.Verdict, str]] = field(default_factory=dict)
    reseed_failures: list[str] = field(default_factory=list)

    def add(self, verdict: fuzz.Verdict, request: Message) -> None:
        with self.lock:
            self.codes[verdict.code] += 1
            self.reasons[(verdict.code, verdict.reason or "-")] += 1
            self.calls[verdict.rpc] += 1
            self.ok[verdict.rpc] += verdict.code == "OK"
            self.answers.setdefault(verdict.rpc, Counter())[
                f"{verdict.reason}[{verdict.field}]" if verdict.field else verdict.reason or verdict.code] += 1
            if verdict.problem is not None:
                key = verdict.failure_class
                self.broken[key] += 1
                if key not in self.examples:
                    self.examples[key] = (verdict, fuzz.show(request, 500))

    @property
    def total(self) -> int:
        return sum(self.codes.values())


def fuzz_for(target: str, seconds: float, concurrency: int, base_seed: int, per_round: int, reseed_every: float,
             reset_every: float, tally: Tally) -> None:
    """Send fuzzed requests to ``target`` for ``seconds``, at most ``concurrency`` in flight."""
    channel = grpc.insecure_channel(target, options=(("grpc.max_send_message_length", -1),
                                                     ("grpc.max_receive_message_length", -1)))
    pool = fuzz.Pool()
    fuzz.seed(channel, pool)
    requests = fuzz.Requests(pool)
    caller = fuzz.Caller(channel)
    every = fuzz.any_rpc()
    slots = threading.Semaphore(concurrency)
    end = time.monotonic() + seconds
    reseeded = reset = time.monotonic()

    def send(rpc: fuzz.Rpc, request: Message) -> None:
        slots.acquire()
        future = caller.method(rpc).future(request, timeout=fuzz.CALL_TIMEOUT)

        def done(f: grpc.Future) -> None:
            try:
                error = f.exception()
                if error is None:
                    pool.learn(f.result())
                tally.add(fuzz.judge(rpc, request, error), request)  # type: ignore[arg-type]
            finally:
                slots.release()

        future.add_done_callback(done)

    for n in range(10**9):
        if time.monotonic() >= end:
            break
        if time.monotonic() - reseeded > reseed_every:
            due = time.monotonic() - reset > reset_every
            try:
                for verdict, request in fuzz.seed(channel, pool, reset_settings=due):
                    tally.add(verdict, request)  # a stored setting met by the rows seeded now
                reset = time.monotonic() if due else reset
            except grpc.RpcError as exc:
                tally.reseed_failures.append(f"{exc.code().name}: {(exc.details() or '')[:200]}")  # type: ignore[attr-defined]
            reseeded = reset = time.monotonic()

        @seed(base_seed + n)
        @settings(max_examples=per_round, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def one_round(data: st.DataObject) -> None:
            rpc = data.draw(every)
            request = data.draw(requests.request(rpc))
            if time.monotonic() < end:  # always draw: hypothesis wants the same draws for the same choices
                send(rpc, request)

        one_round()
    for _ in range(concurrency):  # wait for the calls in flight
        slots.acquire()
    channel.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed of the first round (default 0)")
    parser.add_argument("--round", type=int, default=200, help="examples per hypothesis round (default 200)")
    parser.add_argument("--reseed", type=float, default=10.0, help="seed real rows again every N s (default 10)")
    parser.add_argument("--reset", type=float, default=60.0,
                        help="set the seeded queues' settings back every N s (default 60): until then a setting the "
                             "fuzzer stored meets the rows seeded in the meantime")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any contract break, not only UNKNOWN/INTERNAL")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # hypothesis' "@seed/@given outside a test" notes

    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp), fuzz.SERVER_CONFIG).start()
        serving = "yes"
        try:
            started = time.monotonic()
            fuzz_for(server.grpc_target, args.seconds, args.concurrency, args.seed, args.round, args.reseed, args.reset,
                     tally)
            elapsed = time.monotonic() - started
            try:
                fuzz.check_serving(server.grpc_target)
            except Exception as exc:
                serving = f"NO: {type(exc).__name__}: {str(exc)[:200]}"
            rss = fuzz.peak_rss_kib(server.pid)
            errors = fuzz.server_errors(server.output)
            db_bytes = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file())
            alive = server.proc is not None and server.proc.poll() is None
        finally:
            server.terminate(timeout=15)
            server.kill()

    total = tally.total
    print(f"## fuzz: {args.seconds:g} s, {args.concurrency} in flight, seed {args.seed}, round {args.round}\n")
    others = sum(n for k, n in tally.broken.items() if k[1] not in ("UNKNOWN", "INTERNAL"))
    rows = [["requests", f"{total:,}"], ["requests/s", f"{total / elapsed:,.0f}"],
            ["UNKNOWN", str(tally.codes["UNKNOWN"])], ["INTERNAL", str(tally.codes["INTERNAL"])],
            ["other contract breaks", str(others)],
            ["reseeds with settings reset refused", f"{len(tally.reseed_failures)} {tally.reseed_failures[:1] or ''}"],
            ["ERROR lines in the server log", f"{sum(errors.values()):,}"],
            ["server alive / serving at the end", f"{'yes' if alive else 'NO'} / {serving}"],
            ["peak RSS server (VmHWM)", f"{rss.get(server.pid, 0) / 1024:,.0f} MiB"],
            ["peak RSS writer child(ren)", ", ".join(f"{v / 1024:,.0f} MiB" for k, v in rss.items()
                                                       if k != server.pid) or "-"],
            ["data folder at the end", f"{db_bytes / 2**20:,.0f} MiB"]]
    print(table(["what", "value"], rows))
    print()
    print(table(["status", "answers", "share"],
                [[code, f"{n:,}", f"{n / total:.1%}"] for code, n in tally.codes.most_common()]))
    print()
    print(table(["status", "ErrorInfo reason", "answers"],
                [[code, reason, f"{n:,}"] for (code, reason), n in sorted(tally.reasons.items())]))
    print()
    print(table(["rpc", "calls", "OK", "most frequent answers (ErrorInfo reason)"],
                [[rpc, f"{n:,}", f"{tally.ok[rpc] / n:.0%}",
                  ", ".join(f"{r} {c}" for r, c in tally.answers[rpc].most_common(4) if r != "OK")]
                 for rpc, n in sorted(tally.calls.items())]))
    if tally.broken:
        kinds: dict[tuple[str, str], tuple[int, set[str]]] = {}
        for key, n in tally.broken.items():
            verdict = tally.examples[key][0]
            rpc, code = key[0], key[1]
            shape = "".join("#" if c.isdigit() else c for c in (verdict.problem or ""))
            shape = "; ".join(p for p in shape.split("; ") if not p.startswith("google.rpc.Status code"))
            count, rpcs = kinds.get((code, shape), (0, set()))
            kinds[(code, shape)] = (count + n, rpcs | {rpc})
        print(f"\n### {sum(tally.broken.values()):,} answers break the contract, in {len(tally.broken)} classes\n")
        print(table(["status", "problem", "answers", "RPCs"],
                    [[code, shape[:90], f"{n:,}", ", ".join(sorted(r.split(".")[1] for r in rpcs))]
                     for (code, shape), (n, rpcs) in sorted(kinds.items(), key=lambda kv: -kv[1][0])]))
        print()
        order = sorted(tally.broken.items(), key=lambda kv: (kv[0][1] not in ("UNKNOWN", "INTERNAL"), -kv[1]))
        for key, n in order:
            verdict, request = tally.examples[key]
            print(f"- **{verdict.rpc} {verdict.code}** reason={verdict.reason or '-'} ×{n}: {verdict.problem}\n"
                  f"  - message: {verdict.message[:300]!r}\n  - request: `{request}`")
    if errors:
        print("\n### ERROR lines in the server log\n")
        print(table(["line (digits folded)", "count"], [[line, f"{n:,}"] for line, n in errors.most_common(20)]))
    bad = tally.codes["UNKNOWN"] + tally.codes["INTERNAL"]
    if bad or serving != "yes" or not alive or (args.strict and tally.broken):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
