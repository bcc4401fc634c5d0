"""Chords under ``kill -9``: the process-level chaos check of docs/workflows.md, shared by
``tests/integration/test_workflow_chaos.py`` (a few rounds) and
``benchmarks/workflow_chaos.py`` (50 rounds, a result table).

Set-up: one ``sepp serve`` on SQLite, or ``nodes`` (default 2) on one PostgreSQL schema,
each on a fixed loopback port so a restarted server is found where the killed one was. Two
worker processes (``multiprocessing`` spawn; one per node on PostgreSQL) run the handlers:

* ``child``: payload ``{"fail": ""|"retry"|"dead"}``. ``"retry"`` raises ``Retry(after=0)``
  on its first attempt, then succeeds; ``"dead"`` raises ``DeadLetter`` (the job is
  DEAD_LETTERED at once). One child of every ``FAILING_EVERY``-th chord is ``"dead"``,
  every ``RETRY_EVERY``-th child is ``"retry"``.
* ``callback``: notes the time, asks the admin API how many of its chord's children
  (``custom["chord"]``, the chord's key) are not COMPLETED, appends ``start <job id>
  <attempt> <lease id> <unix time> <that count>`` to the worker's record file and
  ``fsync``s it, waits 0–20 ms, appends ``done …`` likewise, then returns (the ack). The
  record files survive the server's kill (they belong to the workers).

A round: ``chords`` threads each send one ``chord`` of ``children`` children and one
callback (``Client.enqueue_workflow`` with an idempotency key, retried with the same key
until an answer, so a call cut by the kill stores one workflow). When a random share of the
round's jobs (0 to 105 %) has run, one server is killed with SIGKILL (on PostgreSQL node
``round % nodes``) and started again on the same data and port. The round ends when every
callback is COMPLETED or CANCELLED (or its deadline passes); then ``check_round`` reads the
store through the admin API and the record files, and the round's queues are purged.

What is checked, per callback (``Problems`` lists each breach):

1. **Terminal**: COMPLETED or CANCELLED at the end. A DEFERRED callback whose children are
   all terminal is *stuck* (the finding this looks for); one whose children still run when
   the round's deadline (120 s) passes is *not settled in time* (a machine too loaded for
   the deadline). Both are breaches.
2. **CANCELLED only for a named failed dependency**: its reason is ``DEPENDENCY_FAILED:
   dependency <id> was dead-lettered|cancelled``, ``<id>`` is one of its own children, and
   that child is DEAD_LETTERED or CANCELLED. It has no ``start`` record (never ran).
3. **COMPLETED exactly once**: the store completes a job once; the record shows at least one
   ``done``. Runs beyond the first are the at-least-once rule at work, allowed only when cut
   by the kill: for two ``start`` records of one callback, a server was killed before the
   later start and came back after the earlier attempt was leased (the attempt's
   ``started_at``). A handler may start after the kill and still lose its lease to it: it
   was prefetched before, and its lease ran out while the server was away.
4. **Never started early**: every ``start`` record's time is later than the
   ``finished_at`` of each of its children (the server stamps ``finished_at`` before the
   ack's commit, which is what releases the callback, so a handler that starts earlier ran
   before its release), and the store showed every child COMPLETED at that start (a count
   of 0; ``?`` when the server was being killed is counted as ``unchecked``).
   Not a breach, counted apart (``stamped_early``): an attempt's ``started_at`` earlier
   than a child's ``finished_at``. A Reserve over several queues stamps its leases with one
   time read before its per-queue statements; on PostgreSQL a commit on another node that
   lands between them is seen by the later statement although it is stamped later.
5. A chord with a ``"dead"`` child has its callback CANCELLED; a chord without has it
   COMPLETED unless a child dead-lettered by running out of attempts (counted apart as
   ``unplanned dead``: a kill costs an attempt when a lease runs out).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sepp import Client, EnqueueRequest, Payload, TransportError, chord
from sepp.api.v1 import common_pb2 as pb
from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess, free_port
from support.servers import FAST, backend_config

CHILD_QUEUE = "wfc-children"
CALLBACK_QUEUE = "wfc-callbacks"
#: One child of every FAILING_EVERY-th chord dead-letters (its callback must be cancelled).
FAILING_EVERY = 4
#: Every RETRY_EVERY-th child fails its first attempt (a retry releases nothing).
RETRY_EVERY = 10
#: Attempts of every job: a retry, and a lease or two lost to a kill, still leave room.
MAX_ATTEMPTS = 6
#: The workers' lease, seconds: a job held when its server died comes back this soon. At
#: 3 s, a loaded machine (load 20 on 2 cores) let leases run out unextended with no kill.
LEASE = 10.0
TERMINAL = (pb.COMPLETED, pb.DEAD_LETTERED, pb.CANCELLED)


# ----------------------------------------------------------------- the worker process


def _record(fd: int, *fields: object) -> None:
    """One line appended to the record file and fsynced before the handler goes on."""
    os.write(fd, (" ".join(str(f) for f in fields) + "\n").encode())
    os.fsync(fd)


def worker_main(target: str, record: str, ran: Any, worker_id: str) -> None:
    """Run one Worker on both queues until the process is terminated. ``ran``: a shared
    counter of jobs whose handler finished (the driver times its kill by it)."""
    import asyncio
    import logging

    from sepp.worker import DeadLetter, Job, Retry, Worker

    logging.basicConfig(level=logging.ERROR)  # the kills make every worker log its retries
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    worker = Worker(target, [CHILD_QUEUE, CALLBACK_QUEUE], concurrency=16, lease_duration=LEASE,
                    poll_wait=0.5, worker_id=worker_id)

    def count() -> None:
        with ran.get_lock():
            ran.value += 1

    @worker.handler("child")
    async def child(job: Job) -> None:
        fail = json.loads(job.payload)["fail"]
        if fail == "dead":
            count()
            raise DeadLetter("planned failure")
        if fail == "retry" and job.attempt == 1:
            raise Retry("planned retry", after=0)
        count()

    def unfinished(chord_key: str) -> str:
        """How many of the chord's children the store does not show COMPLETED right now
        ("?" when the server cannot be asked: it is being killed)."""
        try:
            with AdminClient(target, timeout=10) as admin:
                kids = list(admin.iter_jobs(queue=CHILD_QUEUE, where=[("chord", chord_key)]))
        except Exception:
            return "?"
        return str(sum(1 for k in kids if k.job.state != pb.COMPLETED))

    @worker.handler("callback")
    async def callback(job: Job) -> None:
        at = f"{time.time():.6f}"
        left = await asyncio.to_thread(unfinished, str(job.custom["chord"]))
        _record(fd, "start", job.id, job.attempt, job.lease_id, at, left)
        await asyncio.sleep(random.uniform(0, 0.02))
        _record(fd, "done", job.id, job.attempt, job.lease_id, f"{time.time():.6f}", "-")
        count()

    worker.run_sync()


# ----------------------------------------------------------------- servers and workers


@dataclass
class Cluster:
    """The servers (fixed ports), the worker processes and their record files."""

    backend: str
    root: Path
    nodes: int
    servers: list[ServerProcess] = field(default_factory=list)
    workers: list[Any] = field(default_factory=list)
    records: list[Path] = field(default_factory=list)
    ran: Any = None
    #: (unix time before the SIGKILL, unix time the server answered again) of every kill.
    kills: list[tuple[float, float]] = field(default_factory=list)

    def start(self) -> Cluster:
        store = backend_config(self.backend)
        for i in range(self.nodes):
            config = {**FAST, **store, "grpc_listen": f"127.0.0.1:{free_port()}", "log_level": "warning",
                      "node_name": f"wfc-{uuid.uuid4().hex[:6]}-{i}"}
            self.servers.append(ServerProcess(self.root / f"node-{i}", config).start())
        ctx = multiprocessing.get_context("spawn")
        self.ran = ctx.Value("q", 0)
        for i in range(2):
            record = self.root / f"record-{i}.txt"
            self.records.append(record)
            target = self.servers[i % self.nodes].grpc_target
            proc = ctx.Process(target=worker_main, args=(target, str(record), self.ran, f"wfc-worker-{i}"),
                               daemon=True)
            proc.start()
            self.workers.append(proc)
        return self

    def kill(self, node: int) -> float:
        """SIGKILL node ``node`` and start it again on its data and port; seconds it was away."""
        server = self.servers[node]
        t0 = time.time()
        server.kill()
        server.start()
        self.kills.append((t0, time.time()))
        return time.time() - t0

    def stop(self) -> None:
        for proc in self.workers:
            proc.terminate()
            proc.join(15)
            if proc.is_alive():
                proc.kill()
        for server in self.servers:
            try:
                server.terminate(timeout=15)
            except Exception:
                pass
            server.kill()


# ----------------------------------------------------------------- one round


@dataclass
class RoundResult:
    """What one round saw: counts, the kill's timing and every breach (empty: all held)."""

    completed: int = 0
    cancelled: int = 0
    reruns: int = 0
    unplanned_dead: int = 0
    deferred_left: int = 0
    #: Handler starts whose store check could not be made (the server was away).
    unchecked: int = 0
    #: Seconds by which a callback attempt's ``started_at`` precedes its last child's
    #: ``finished_at`` (not a breach: see ``check_round``), one entry per such callback.
    stamped_early: list[float] = field(default_factory=list)
    kill_at: float = 0.0
    away: float = 0.0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def _payload(fail: str) -> Payload:
    return Payload.json({"fail": fail})


def _send(client: Client, round_no: int, index: int, children: int, run: str,
          out: dict[int, list[str]], problems: list[str]) -> None:
    """Send chord ``index`` of the round until the server answers (same key each time)."""
    dead = index % FAILING_EVERY == 0
    key = f"{run}-r{round_no}-c{index}"
    kids = [EnqueueRequest(CHILD_QUEUE, "child", max_attempts=MAX_ATTEMPTS, custom={"chord": key},
                           payload=_payload("dead" if dead and k == children // 2 else
                                            "retry" if k % RETRY_EVERY == 3 else ""))
            for k in range(children)]
    cb = EnqueueRequest(CALLBACK_QUEUE, "callback", max_attempts=MAX_ATTEMPTS, payload=_payload(""),
                        custom={"chord": key})
    wf = chord(kids, cb, idempotency_key=key)
    deadline = time.monotonic() + 120
    while True:
        try:
            ack = client.enqueue_workflow(wf)
            out[index] = [a.job_id for a in ack.acks]
            return
        except TransportError as exc:
            if time.monotonic() > deadline:
                problems.append(f"chord {index} never stored: {exc}")
                return
            time.sleep(0.1)


def _finished(admin: AdminClient, queue: str) -> dict[str, pb.Job]:
    return {s.job.id: s.job for s in admin.iter_jobs(queue=queue)}


#: One line of a record file: (kind "start"|"done", attempt, unix time, children the store
#: did not show COMPLETED at the start: a count, "?" when unknown, "-" for "done").
Record = tuple[str, int, float, str]


def _records(paths: list[Path]) -> dict[str, list[Record]]:
    """Callback id → its records, in time order."""
    out: dict[str, list[Record]] = defaultdict(list)
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                kind, job_id, attempt, _lease, at, left = line.split()
                out[job_id].append((kind, int(attempt), float(at), left))
    for recs in out.values():
        recs.sort(key=lambda r: r[2])
    return out


def _ts(t: Any) -> float:
    return float(t.seconds) + float(t.nanos) / 1e9


def _story(job: pb.Job, starts: list[Record]) -> str:
    """A job's attempts and finish as one line (for a breach's message)."""
    tries = ", ".join(f"#{a.attempt} {a.outcome} {_ts(a.started_at):.4f}-{_ts(a.ended_at):.4f} on {a.node}"
                      for a in job.attempts)
    recs = ", ".join(f"started #{r[1]} at {r[2]:.4f}" for r in starts)
    return f"{job.id} {pb.JobState.Name(job.state)} at {_ts(job.finished_at):.4f} [{tries}] {recs}"


def check_round(cluster: Cluster, chords: dict[int, list[str]], jobs: dict[str, pb.Job],
                records: dict[str, list[Record]], result: RoundResult) -> None:
    """Rules 1–5 of the module doc over one round's jobs; breaches go to ``result.problems``."""
    p = result.problems
    for index, ids in sorted(chords.items()):
        kids, cb_id = ids[:-1], ids[-1]
        cb = jobs.get(cb_id)
        if cb is None:
            p.append(f"chord {index}: callback {cb_id} not stored")
            continue
        kid_jobs = [jobs[k] for k in kids if k in jobs]
        failed = {k.id for k in kid_jobs if k.state in (pb.DEAD_LETTERED, pb.CANCELLED)}
        planned = index % FAILING_EVERY == 0
        result.unplanned_dead += len(failed) - (1 if planned and failed else 0)
        recs = records.get(cb_id, [])
        starts = [r for r in recs if r[0] == "start"]
        if cb.state == pb.CANCELLED:
            result.cancelled += 1
            named = cb.dead_letter_reason.removeprefix("DEPENDENCY_FAILED: dependency ").split(" ")[0]
            if not cb.dead_letter_reason.startswith("DEPENDENCY_FAILED") or named not in failed:
                p.append(f"chord {index}: callback cancelled for {cb.dead_letter_reason!r}, "
                         f"not a failed child (failed: {sorted(failed)})")
            if starts:
                p.append(f"chord {index}: cancelled callback ran {len(starts)} time(s)")
            if not planned and not failed:
                p.append(f"chord {index}: callback cancelled without a failed child")
        elif cb.state == pb.COMPLETED:
            result.completed += 1
            if failed:
                p.append(f"chord {index}: callback completed although {sorted(failed)} failed")
            if not any(r[0] == "done" for r in recs):
                p.append(f"chord {index}: callback COMPLETED without a 'done' record")
            not_done = [k.id for k in kid_jobs if k.state != pb.COMPLETED]
            if not_done or len(kid_jobs) != len(kids):
                p.append(f"chord {index}: callback COMPLETED, children not all COMPLETED: {not_done[:3]}")
            last_child = max((_ts(k.finished_at) for k in kid_jobs), default=0.0)
            late = max(kid_jobs, key=lambda k: _ts(k.finished_at))
            early = [r[2] for r in starts if r[2] < last_child]
            if early:
                p.append(f"chord {index}: callback's handler started {last_child - min(early):.3f} s before its "
                         f"last child finished ({_story(cb, starts)}; last child {_story(late, [])})")
            seen_unfinished = [r for r in starts if r[3] not in ("0", "?")]
            if seen_unfinished:
                p.append(f"chord {index}: callback's handler started while {seen_unfinished[0][3]} children "
                         f"were not COMPLETED ({_story(cb, starts)})")
            result.unchecked += sum(1 for r in starts if r[3] == "?")
            stamped = [last_child - _ts(a.started_at) for a in cb.attempts if _ts(a.started_at) < last_child]
            if stamped:
                result.stamped_early.append(max(stamped))
            granted = {a.attempt: _ts(a.started_at) for a in cb.attempts}
            for a, b in itertools.pairwise(starts):
                # The earlier attempt was leased (granted) before a server went away, and that
                # server was gone before the later start: its lease could not be kept.
                if not any(granted.get(a[1], a[2]) <= back and killed <= b[2] for killed, back in cluster.kills):
                    p.append(f"chord {index}: callback started twice (attempts {a[1]}, {b[1]}) with no kill "
                             f"in between ({_story(cb, starts)}; kills {cluster.kills[-2:]})")
            result.reruns += max(0, len(starts) - 1)
        elif cb.state == pb.DEFERRED and all(k.state in TERMINAL for k in kid_jobs):
            p.append(f"chord {index}: callback stuck DEFERRED, every child terminal "
                     f"({sorted({pb.JobState.Name(k.state) for k in kid_jobs})})")
        else:
            p.append(f"chord {index}: round not settled in time: callback {pb.JobState.Name(cb.state)}, "
                     f"children {sorted({pb.JobState.Name(k.state) for k in kid_jobs})}")
    for job in jobs.values():
        if job.state == pb.DEFERRED:
            result.deferred_left += 1
    if result.deferred_left:
        p.append(f"{result.deferred_left} job(s) left DEFERRED")


def run_round(cluster: Cluster, round_no: int, chords: int, children: int, rng: random.Random,
              run: str, settle: float = 120.0) -> RoundResult:
    """One round (module doc): send, kill and restart once, wait, check, purge."""
    result = RoundResult()
    t0 = time.monotonic()
    base = cluster.ran.value
    result.kill_at = rng.uniform(0.0, 1.05)
    # Jobs whose handler will finish: every child, and the callbacks not cancelled.
    expected = chords * children + chords - len(range(0, chords, FAILING_EVERY))
    sent: dict[int, list[str]] = {}
    clients = [Client(s.grpc_target) for s in cluster.servers]
    try:
        threads = [threading.Thread(target=_send, args=(clients[i % cluster.nodes], round_no, i, children, run,
                                                        sent, result.problems), daemon=True)
                   for i in range(chords)]
        for t in threads:
            t.start()
        while cluster.ran.value - base < min(result.kill_at, 1.0) * expected and time.monotonic() - t0 < 60:
            time.sleep(0.005)
        if result.kill_at > 1.0:  # past the end: the kill lands while the round settles
            time.sleep((result.kill_at - 1.0) * 2)
        result.away = cluster.kill(round_no % cluster.nodes)
        for t in threads:
            t.join(150)
    finally:
        for c in clients:
            c.close()
    callbacks = {ids[-1] for ids in sent.values()}
    with AdminClient(cluster.servers[0].grpc_target) as admin:
        deadline = time.monotonic() + settle
        while True:
            cbs = _finished(admin, CALLBACK_QUEUE)
            if all(cbs[c].state in (pb.COMPLETED, pb.CANCELLED) for c in callbacks if c in cbs) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.1)
        result.seconds = time.monotonic() - t0
        jobs = {**_finished(admin, CHILD_QUEUE), **{c: admin.get_job(c) for c in callbacks}}
        check_round(cluster, sent, jobs, _records(cluster.records), result)
        admin.purge_queue(CHILD_QUEUE, [pb.COMPLETED, pb.DEAD_LETTERED, pb.CANCELLED])
        admin.purge_queue(CALLBACK_QUEUE, [pb.COMPLETED, pb.DEAD_LETTERED, pb.CANCELLED])
    for path in cluster.records:
        if path.exists():  # the workers append with O_APPEND: truncating starts the next round clean
            os.truncate(path, 0)
    return result


def run_chaos(backend: str, root: Path, rounds: int, *, chords: int = 20, children: int = 50,
              nodes: int | None = None, seed: int | None = None, progress: bool = False) -> list[RoundResult]:
    """``rounds`` rounds on ``backend`` (``sqlite`` or ``postgres``) in folder ``root``; one
    ``RoundResult`` per round. ``nodes``: servers on one PostgreSQL schema (default 2; 1 on
    SQLite, the only choice)."""
    n = nodes or (2 if backend == "postgres" else 1)
    if backend == "sqlite" and n != 1:
        raise ValueError("SQLite runs one server")
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:8]
    cluster = Cluster(backend, root, n).start()
    results: list[RoundResult] = []
    try:
        for r in range(rounds):
            got = run_round(cluster, r, chords, children, rng, run)
            results.append(got)
            if progress:
                print(f"round {r + 1}/{rounds}: {got.completed} completed, {got.cancelled} cancelled, "
                      f"{got.reruns} rerun(s), kill at {got.kill_at:.0%}, {got.seconds:.1f} s, "
                      f"{len(got.problems)} problem(s) {got.problems[:2]}", flush=True)
    finally:
        cluster.stop()
    return results
