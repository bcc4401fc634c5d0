"""Several PostgreSQL nodes on one schema and an unlucky operator, through real ``sepp
serve`` processes, raw gRPC stubs and plain asyncpg.

Rules checked (docs/decisions.md "PostgreSQL: several nodes on one database"): overlapping
idempotency keys from several nodes never deadlock; a long-polling Reserve wakes for a job
another node put in a queue new to this node; killed backends (``pg_terminate_backend``)
answer UNAVAILABLE and the node recovers by itself; a node killed -9 mid-batch loses no
acknowledged job; when the node holding a key's claim dies mid-transaction the racing node
takes the key; a schema newer than the build, a missing role and a node name with a control
character are one-line refusals at start. A frozen node holding a key no longer stalls the
other nodes' writes (PostgreSQL ends its idle transaction after ``IDLE_TX_TIMEOUT``).

Every schema comes from ``support.backends.fresh_schema`` (dropped at the end of the
session); backends are terminated only by this test's own node names, never other
sessions'. The text a NUL cannot be stored in is tests/integration/test_nul_text.py."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import duration_pb2
from support.admin import connect
from support.backends import PG_TEST_DSN, fresh_schema
from support.failures import failure_of
from support.servers import FAST

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

T = 20.0  # seconds, every unary call's deadline

pytestmark = pytest.mark.postgres_only(reason="several nodes on one PostgreSQL database")


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------- helpers


def _pg_config(schema: str, node: str, **extra: Any) -> dict[str, Any]:
    return {**FAST, "storage": "postgres", "postgres_dsn": PG_TEST_DSN, "postgres": {"schema": schema},
            "node_name": node, **extra}


def _pg(coro_fn: Any, *args: Any) -> Any:
    """Run ``coro_fn(conn, *args)`` on a plain asyncpg connection to the test database."""
    async def run() -> Any:
        conn = await asyncpg.connect(PG_TEST_DSN, timeout=10)
        try:
            return await coro_fn(conn, *args)
        finally:
            await conn.close()
    return asyncio.run(run())


async def _job_ids(conn: asyncpg.Connection, schema: str) -> set[str]:
    return {str(uuid.UUID(bytes=bytes(r[0]))) for r in await conn.fetch(f"SELECT id FROM {schema}.jobs")}


async def _terminate(conn: asyncpg.Connection, node: str) -> int:
    """Terminate the sessions of node ``node`` only (application_name 'sepp NODE' and
    'sepp NODE listen'), never another test's or another engineer's."""
    return int(await conn.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name IN ($1, $2) AND pid <> pg_backend_pid()", f"sepp {node}", f"sepp {node} listen"))


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """A list the test appends started nodes to; all are stopped at teardown."""
    started: list[ServerProcess] = []
    yield started
    for proc in started:
        try:
            proc.terminate(timeout=15)
        except Exception:
            pass
        proc.kill()


def _start(nodes: list[ServerProcess], tmp_path: Path, config: dict[str, Any]) -> ServerProcess:
    proc = ServerProcess(tmp_path / f"node-{len(nodes)}", config)
    nodes.append(proc)
    return proc.start()


def _node_name() -> str:
    return f"brk-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------- tests


def test_overlapping_keyed_batches_from_two_nodes_never_deadlock(nodes: list[ServerProcess], tmp_path: Path) -> None:
    """Finding B2: 8 concurrent EnqueueBatch calls of 256 keyed jobs drawn from one pool of
    300 keys, over two nodes, claimed the keys in request order: PostgreSQL found deadlocks
    (UNAVAILABLE 'could not write to its store … deadlock detected', 11 of 48 calls) and
    other calls passed a 30 s deadline (the run took 160 s). Claimed in (queue, key) order
    every call succeeds at once, every key answers one id, one job per key is stored."""
    schema = fresh_schema()
    a = _start(nodes, tmp_path, _pg_config(schema, _node_name()))
    b = _start(nodes, tmp_path, _pg_config(schema, _node_name()))
    keys = [f"key-{i}" for i in range(300)]
    answers: dict[str, set[str]] = defaultdict(set)
    failures: Counter[str] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def run(n: int) -> None:
        with connect((a, b)[n % 2].grpc_target) as s:
            rnd = random.Random(n)
            for rep in range(3):
                chosen = [rnd.choice(keys) for _ in range(256)]
                jobs = [pb.EnqueueRequest(queue="hot", job_type="t", idempotency_key=k) for k in chosen]
                barrier.wait(30)
                try:
                    if rep == 2:
                        acks = list(s.producer.EnqueueAtomic(ppb.EnqueueBatchRequest(jobs=jobs), timeout=T).acks)
                    else:
                        res = s.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=jobs), timeout=T).results
                        assert all(x.WhichOneof("outcome") == "ack" for x in res)
                        acks = [x.ack for x in res]
                except grpc.RpcError as err:
                    f = failure_of(err)
                    with lock:
                        failures[f"{f.code.name} {f.reason} {f.message[:120]}"] += 1
                    continue
                with lock:
                    for k, ack in zip(chosen, acks, strict=True):
                        answers[k].add(ack.job_id)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, dict(failures)
    assert all(len(ids) == 1 for ids in answers.values())
    stored = _pg(lambda c: c.fetch(f"SELECT idempotency_key, count(*) FROM {schema}.jobs GROUP BY 1"))
    assert {r[0] for r in stored} == set(answers) and all(r[1] == 1 for r in stored)


def test_long_poll_on_another_node_wakes_for_a_queue_new_to_it(nodes: list[ServerProcess], tmp_path: Path) -> None:
    """Finding B3: node B long-polls a queue nobody has created; node A creates it by
    enqueueing a job. A's NOTIFY woke B's reserver before B's queue refresh knew the queue,
    and the refresh woke only resumed queues: the Reserve waited its whole 8 s and answered
    nothing (a wake-up is due within 100 ms). Now the refresh also wakes queues new to the node."""
    schema = fresh_schema()
    a = _start(nodes, tmp_path, _pg_config(schema, _node_name()))
    b = _start(nodes, tmp_path, _pg_config(schema, _node_name()))
    queue = _queue()
    got: dict[str, Any] = {}
    waiting = threading.Event()

    def reserve() -> None:
        with connect(b.grpc_target) as s:
            waiting.set()
            t0 = time.monotonic()
            resp = s.worker.Reserve(wpb.ReserveRequest(queues=[queue], max_jobs=1, worker_id="w",
                                                       wait=duration_pb2.Duration(seconds=8)), timeout=T)
            got["jobs"], got["elapsed"] = [r.job.id for r in resp.reservations], time.monotonic() - t0

    thread = threading.Thread(target=reserve)
    thread.start()
    waiting.wait(10)
    with connect(a.grpc_target) as s:
        job_id = s.enqueue(queue)
    thread.join(30)
    assert got["jobs"] == [job_id]
    assert got["elapsed"] < 4.0  # far below the 8 s wait (a wake-up is due within 100 ms of the commit)


def test_terminated_backends_answer_unavailable_and_the_node_recovers(nodes: list[ServerProcess],
                                                                       tmp_path: Path) -> None:
    """pg_terminate_backend of every session of one node (writers, readers, listener) twice
    mid-load: the calls in flight fail as UNAVAILABLE / STORE_UNAVAILABLE only (never
    INTERNAL or UNKNOWN), the node serves again by itself, every acknowledged job is stored,
    and a long-poll there still wakes for a job enqueued on another node."""
    schema, name = fresh_schema(), _node_name()
    a = _start(nodes, tmp_path, _pg_config(schema, name))
    b = _start(nodes, tmp_path, _pg_config(schema, _node_name()))
    acked: set[str] = set()
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def produce() -> None:
        with connect(a.grpc_target) as s:
            while not stop.is_set():
                jobs = [pb.EnqueueRequest(queue="load", job_type="t", idempotency_key=f"{uuid.uuid4()}"
                                          if i % 4 == 0 else "") for i in range(50)]
                try:
                    res = s.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=jobs), timeout=T).results
                    with lock:
                        acked.update(x.ack.job_id for x in res)
                        outcomes["ok"] += 1
                except grpc.RpcError as err:
                    f = failure_of(err)
                    with lock:
                        outcomes[f"{f.code.name} {f.reason}"] += 1

    def work() -> None:
        with connect(a.grpc_target) as s:
            while not stop.is_set():
                try:
                    rs = s.worker.Reserve(wpb.ReserveRequest(queues=["load"], max_jobs=20, worker_id="w"),
                                          timeout=T).reservations
                    if rs:
                        s.worker.Settle(wpb.SettleRequest(items=[wpb.SettleItem(ack=wpb.AckRequest(
                            job_id=r.job.id, lease_id=r.lease_id)) for r in rs]), timeout=T)
                except grpc.RpcError as err:
                    f = failure_of(err)
                    with lock:
                        outcomes[f"{f.code.name} {f.reason}"] += 1

    threads = [threading.Thread(target=produce) for _ in range(3)] + [threading.Thread(target=work)]
    for t in threads:
        t.start()
    try:
        for _ in range(2):
            seen = len(acked)
            deadline = time.monotonic() + 20
            while len(acked) < seen + 500 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(acked) >= seen + 500, f"the node did not recover: {dict(outcomes)}"
            assert _pg(_terminate, name) >= 2
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert set(outcomes) <= {"ok", "UNAVAILABLE STORE_UNAVAILABLE"}, dict(outcomes)
    assert acked <= _pg(_job_ids, schema)
    # The listener came back too: a long-poll on the terminated node wakes for B's enqueue.
    queue = _queue()
    with connect(b.grpc_target) as sb:
        sb.enqueue(queue)  # the queue exists everywhere first
    with connect(a.grpc_target) as sa:
        deadline = time.monotonic() + 10
        while sa.reserve(queue) == [] and time.monotonic() < deadline:
            time.sleep(0.05)
        got: list[str] = []
        thread = threading.Thread(target=lambda: got.extend(r.job.id for r in sa.reserve(queue, wait=8)))
        thread.start()
        with connect(b.grpc_target) as sb:
            job_id = sb.enqueue(queue)
        thread.join(30)
    assert got == [job_id]


def test_node_killed_mid_batch_loses_no_acknowledged_job(nodes: list[ServerProcess], tmp_path: Path) -> None:
    """SIGKILL of a node while batched enqueues (plain and keyed) are in flight on it: every
    job it acknowledged is in the database, the calls cut short fail as UNAVAILABLE (the
    channel broke), and the other node goes on serving."""
    schema = fresh_schema()
    a = _start(nodes, tmp_path, _pg_config(schema, _node_name()))
    b = _start(nodes, tmp_path, _pg_config(schema, _node_name()))
    acked: set[str] = set()
    codes: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def produce(n: int) -> None:
        with connect(a.grpc_target) as s:
            i = 0
            while not stop.is_set():
                i += 1
                jobs = [pb.EnqueueRequest(queue="k", job_type="t", idempotency_key=f"{n}-{i}-{j}" if j % 2 else "")
                        for j in range(128)]
                try:
                    res = s.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=jobs), timeout=5).results
                except grpc.RpcError as err:
                    with lock:
                        codes[err.code().name] += 1  # type: ignore[attr-defined]
                    continue
                with lock:
                    acked.update(x.ack.job_id for x in res)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 20
        while len(acked) < 3000 and time.monotonic() < deadline:
            time.sleep(0.01)
        a.kill()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert len(acked) >= 3000
    assert set(codes) <= {"UNAVAILABLE"}, dict(codes)
    assert acked <= _pg(_job_ids, schema)
    with connect(b.grpc_target) as s:
        assert s.enqueue("k")


def test_schema_newer_than_this_build_is_a_clean_refusal(nodes: list[ServerProcess], tmp_path: Path) -> None:
    """A schema migrated by a newer sepp (version 99 in schema_migrations): ``sepp serve``
    and ``sepp migrate`` refuse with one line naming both versions, exit 1, no traceback."""
    schema = fresh_schema()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    done = subprocess.run([sys.executable, "-m", "sepp", "migrate", "--postgres-dsn", PG_TEST_DSN, "--schema", schema],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    _pg(lambda c: c.execute(f"INSERT INTO {schema}.schema_migrations (version, name) VALUES (99, 'future')"))
    again = subprocess.run([sys.executable, "-m", "sepp", "migrate", "--postgres-dsn", PG_TEST_DSN, "--schema", schema],
                           capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 1
    assert f"database schema {schema} is at version 99, newer than this sepp knows" in again.stderr
    assert "Traceback" not in again.stderr + again.stdout
    proc = ServerProcess(tmp_path / "newer", _pg_config(schema, _node_name()))
    nodes.append(proc)
    with pytest.raises(RuntimeError):
        proc.start()
    assert proc.proc is not None and proc.proc.wait(10) == 1
    text = "\n".join(proc.output)
    assert f"database schema {schema} is at version 99, newer than this sepp knows" in text
    assert "Traceback" not in text


def test_missing_role_is_a_one_line_refusal(nodes: list[ServerProcess], tmp_path: Path) -> None:
    """A DSN naming a role that does not exist (pg_hba is trust here, so a wrong password
    cannot be shown): one line naming the DSN and the cause, exit 1, no traceback."""
    role = f"brk_missing_{uuid.uuid4().hex[:8]}"
    dsn = PG_TEST_DSN.replace("postgres@", f"{role}@", 1)
    proc = ServerProcess(tmp_path / "role", {**_pg_config(fresh_schema(), _node_name()), "postgres_dsn": dsn})
    nodes.append(proc)
    with pytest.raises(RuntimeError):
        proc.start()
    assert proc.proc is not None and proc.proc.wait(10) == 1
    text = "\n".join(proc.output)
    assert f'refused the login: role "{role}" does not exist' in text
    assert "Traceback" not in text


def test_node_name_with_a_control_character_is_a_configuration_error(nodes: list[ServerProcess],
                                                                       tmp_path: Path) -> None:
    """Finding B4: a node name holding a control character went into PostgreSQL's
    ``application_name`` (a NUL: 'invalid startup packet layout'), every log line and the
    nodes table. It is a configuration error (exit 2) naming ``node_name``."""
    proc = ServerProcess(tmp_path / "name", _pg_config(fresh_schema(), "ignored"), env={"SEPP_NODE_NAME": "n1\tx"})
    del proc.config["node_name"]
    nodes.append(proc)
    with pytest.raises(RuntimeError):
        proc.start()
    assert proc.proc is not None and proc.proc.wait(10) == 2
    assert any("node_name: must not contain control characters" in line for line in proc.output), proc.output


async def _sessions(conn: asyncpg.Connection, node: str) -> list[tuple[str, str, str]]:
    rows = await conn.fetch("SELECT state, coalesce(wait_event_type, ''), query FROM pg_stat_activity "
                            "WHERE application_name = $1", f"sepp {node}")
    return [(r[0] or "", r[1], r[2] or "") for r in rows]


async def _claim_open(conn: asyncpg.Connection, node: str, schema: str) -> bool:
    """True when a session of ``node`` sits in an open transaction that claimed a key and
    inserted its job (a lock on the idempotency table, its last statement the insert or the
    wake-up after it: since migration 0010 a node inserts the seq it took, so the jobs'
    sequence is not locked): a keyed enqueue waiting for its commit (``debug_commit_delay``),
    not a sweep's."""
    return bool(await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity a WHERE a.application_name = $1 "
        "AND a.state = 'idle in transaction' "
        "AND (a.query LIKE 'INSERT INTO jobs %' OR a.query LIKE 'SELECT pg_notify(%') "
        "AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.relation = to_regclass($2))",
        f"sepp {node}", f"{schema}.idempotency"))


def _until(what: str, check: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def test_key_race_where_the_claiming_node_dies_mid_transaction(nodes: list[ServerProcess], tmp_path: Path) -> None:
    """One of two transactions racing on a key rolls back. Node A claimed key K in a
    transaction still open (``debug_commit_delay``); node B's enqueue of K waits on A's row
    lock; A is SIGKILLed: PostgreSQL rolls A back, B's enqueue takes the key at once
    (``deduplicated`` false), A's caller gets UNAVAILABLE, one job and one claim are stored."""
    schema, name_a, name_b = fresh_schema(), _node_name(), _node_name()
    a = _start(nodes, tmp_path, _pg_config(schema, name_a, debug_commit_delay=3.0))
    b = _start(nodes, tmp_path, _pg_config(schema, name_b))
    with connect(a.grpc_target) as sa, connect(b.grpc_target) as sb:
        lost = sa.producer.Enqueue.future(pb.EnqueueRequest(queue="k", job_type="t", idempotency_key="K"), timeout=30)
        _until("A claimed K in an open transaction", lambda: _pg(_claim_open, name_a, schema))
        won = sb.producer.Enqueue.future(pb.EnqueueRequest(queue="k", job_type="t", idempotency_key="K"), timeout=30)
        _until("B waits on A's lock", lambda: any(s[1] == "Lock" for s in _pg(_sessions, name_b)))
        a.kill()
        with pytest.raises(grpc.RpcError) as err:
            lost.result()
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        ack = won.result()
        assert not ack.deduplicated
        assert sb.enqueue("k", idempotency_key="K") == ack.job_id
    assert _pg(_job_ids, schema) == {ack.job_id}
    claims = _pg(lambda c: c.fetch(f"SELECT key FROM {schema}.idempotency"))
    assert [r[0] for r in claims] == ["K"]


def test_a_frozen_node_holding_a_key_does_not_stop_the_other_nodes_writes(nodes: list[ServerProcess],
                                                                           tmp_path: Path) -> None:
    """Finding B5: node A is frozen (SIGSTOP: a paused VM, a partition that leaves the TCP
    session up) inside a transaction that claimed idempotency key K. On node B, keyed
    enqueues for K wait on A's row lock — one per writer connection (4) — and then a plain
    enqueue into another queue on B waits behind them: DEADLINE_EXCEEDED, B stops taking
    writes until A thaws (PostgreSQL would keep A's session for tcp_keepalives_idle, 2 h by
    default). Fixed: every sepp session has ``idle_in_transaction_session_timeout``
    (``schema.IDLE_TX_TIMEOUT`` = 5 s, plus A's 3 s commit-delay knob), so PostgreSQL ends A's
    frozen session, its lock goes, B's writers go on: B stores K once (its other keyed calls
    are deduplicated against it) and the plain enqueue is answered; A's own call, whose
    transaction was ended, is UNAVAILABLE once A thaws."""
    schema, name_a, name_b = fresh_schema(), _node_name(), _node_name()
    a = _start(nodes, tmp_path, _pg_config(schema, name_a, debug_commit_delay=3.0))
    b = _start(nodes, tmp_path, _pg_config(schema, name_b))
    stopped = False
    with connect(a.grpc_target) as sa, connect(b.grpc_target) as sb:
        first = sa.producer.Enqueue.future(pb.EnqueueRequest(queue="k", job_type="t", idempotency_key="K"),
                                           timeout=60)
        try:
            _until("A claimed K in an open transaction", lambda: _pg(_claim_open, name_a, schema))
            os.kill(a.pid, 19)  # SIGSTOP
            stopped = True
            keyed = []
            for i in range(1, 5):  # one keyed enqueue per writer of B, each left waiting on A's lock
                keyed.append(sb.producer.Enqueue.future(pb.EnqueueRequest(queue="k", job_type="t",
                                                                          idempotency_key="K"), timeout=30))
                _until(f"{i} of B's writers wait on a lock", lambda i=i: sum(
                    s[1] == "Lock" for s in _pg(_sessions, name_b)) >= i)
            t0 = time.monotonic()
            ack = sb.producer.Enqueue(pb.EnqueueRequest(queue="other", job_type="t"), timeout=20)
            waited = time.monotonic() - t0
            assert ack.job_id and waited < 12, f"B's plain enqueue waited {waited:.1f} s"
        finally:
            if stopped:
                os.kill(a.pid, 18)  # SIGCONT
        with pytest.raises(grpc.RpcError) as ended:
            first.result()
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE, ended.value
        assert len({f.result().job_id for f in keyed}) == 1, "B stored K once; its other calls deduplicated"
    # Nothing is asserted on A's own stop, and a graceful one waits the 3 s commit delay for
    # each of its last commits (6 s of teardown): end it at once.
    a.kill()
