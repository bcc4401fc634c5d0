"""Enqueue in the application's transaction, seen by running nodes.

* A job committed through ``sepp.enqueue(...)`` wakes a Reserve long-polling on a node at
  once (the function's NOTIFY on the channel the nodes LISTEN on): the figure is printed;
  what is asserted is the failure mode — a Reserve not woken waits out its 10 s poll
  (``WAKE_BOUND``). The job a worker gets is the one enqueued (payload, custom map, trace
  context, priority), a custom-map search finds it, the queue stats count it, and a queue
  the function created is known to every node.
* One set of rules: the shared validator's table of local-validation cases
  (``local_validation_cases``) gives the same verdict — code, field, limit, actual and
  message — through the SQL function and through gRPC on a node with the table's limits,
  the node having written its configuration into the schema at start.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import psycopg
from support.backends import PG_TEST_DSN
from support.worker import Wire

from sepp import wire
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.postgres._params import named, pyformat, rejection_of_detail, sql_args, statements

from .conftest import ClusterFactory
from .harness import queue_stats

#: Seconds within which a parked 10 s long poll must have been woken.
WAKE_BOUND = 5.0
#: The shared local-validation cases are tests/data/validation_cases.json (the validator's
#: unit tests, the Python and the Rust clients read it too); this module holds the limits
#: (``LIM``, ``QLIM``, ``OPEN``) and the "now" they are judged with.
CASES_MODULE = Path(__file__).parents[1] / "unit" / "test_validation.py"
#: Cases the SQL path cannot be asked: PostgreSQL text holds no U+0000 (the driver refuses
#: the call before the function runs; the helpers' local check refuses the job first), and
#: timestamps are microseconds (a nanosecond past the horizon, nanos out of range).
NOT_IN_SQL = {"job_type U+0000", "scheduled 1 ns past the horizon", "timestamp nanos out of range",
              # exactly at the horizon: the two paths read the clock at different moments
              "scheduled exactly at the horizon"}


def local_validation_cases() -> tuple[list[tuple[str, pb.EnqueueRequest, Any]], Any]:
    """(the shared cases of tests/data/validation_cases.json as wire requests — id, request,
    expected verdict — and the module holding the limits they are judged with: ``LIM``,
    ``QLIM``, ``OPEN``, ``NOW``)."""
    from support import validation_cases as shared

    spec = importlib.util.spec_from_file_location("sepp_local_validation_cases", CASES_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(case["id"], shared.wire_request(case, module.NOW), shared.expected(case)) for case in shared.CASES], module


def _parked(w: Wire, queue: str, wait: float) -> grpc.Future:
    req = wpb.ReserveRequest(queues=[queue], max_jobs=1, worker_id="sql-waker", wait=wire.seconds_to_duration(wait))
    fut = w.worker.Reserve.future(req, timeout=wait + 10)
    done = threading.Event()
    fut.add_done_callback(lambda _: done.set())
    assert not done.wait(0.3), "the Reserve answered at once: nothing to wait for"
    return fut


def test_a_job_committed_through_sql_wakes_a_long_poll_on_another_node(cluster_factory: ClusterFactory) -> None:
    nodes = cluster_factory(2)
    schema = nodes.schema
    one, _, _ = statements(schema)
    w1, w2 = Wire(nodes[0].grpc_target), Wire(nodes[1].grpc_target)
    try:
        with psycopg.connect(PG_TEST_DSN) as conn:
            # A queue the function creates: each node learns it (the NOTIFY's "k").
            req = pb.EnqueueRequest(queue="sqlq", job_type="first", payload=pb.Payload(data=b"{}", encoding="json"),
                                    priority=7, trace_context={"traceparent": TRACE})
            req.custom["tenant"].int_value = 42
            with conn.cursor() as cur:
                cur.execute(pyformat(one), named(sql_args(req)))
                (job_id, _), = cur.fetchall()
            conn.commit()
            got = w2.reserve(["sqlq"], max_jobs=1, wait=5)
            assert [r.job.id for r in got] == [str(job_id)]
            job = got[0].job
            assert (job.job_type, job.payload.data, job.payload.encoding, job.priority) == ("first", b"{}", "json", 7)
            assert job.custom["tenant"].int_value == 42 and dict(job.trace_context) == {"traceparent": TRACE}
            # Found by a custom-map search and counted on the other node (the admin API the UI reads).
            found = w1.admin.ListJobs(apb.ListJobsRequest(custom=[apb.CustomMatch(key="tenant", value="42")]),
                                      timeout=20)
            assert [j.job.id for j in found.jobs] == [str(job_id)]
            assert queue_stats(nodes[0], "sqlq").reserved == 1
            w2.ack(got[0])
            figures = []
            for i in range(5):
                fut = _parked(w1 if i % 2 else w2, "sqlq", 10.0)
                with conn.cursor() as cur:
                    cur.execute(f"SELECT job_id FROM {schema}.enqueue('sqlq', 'wake')")
                    (woken,), = cur.fetchall()
                conn.commit()
                committed = time.monotonic()
                resp = fut.result()
                figures.append(time.monotonic() - committed)
                assert [r.job.id for r in resp.reservations] == [str(woken)]
            print(f"SQL commit → Reserve woken on a node: median {statistics.median(figures) * 1000:.1f} ms, "
                  f"max {max(figures) * 1000:.1f} ms")
            assert max(figures) < WAKE_BOUND, figures
    finally:
        w1.close()
        w2.close()


TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _grpc_verdict(r: pb.Rejection) -> tuple[Any, ...]:
    return (pb.RejectionCode.Name(r.code), r.field, r.limit if r.HasField("limit") else None,
            r.actual if r.HasField("actual") else None, r.message)


async def _sql_verdicts(schema: str, reqs: list[pb.EnqueueRequest]) -> list[tuple[Any, ...] | None]:
    one, _, _ = statements(schema)
    conn = await asyncpg.connect(PG_TEST_DSN)
    out: list[tuple[Any, ...] | None] = []
    try:
        async with conn.transaction():
            for req in reqs:
                try:
                    async with conn.transaction():  # a savepoint per job
                        await conn.fetch(one, *sql_args(req))
                    out.append(None)
                except asyncpg.PostgresError as exc:
                    assert exc.sqlstate.startswith("SE0"), exc
                    rej = rejection_of_detail(exc.detail)
                    assert rej is not None and json.loads(exc.detail)["code"] == int(exc.sqlstate[3:])
                    out.append((rej.code.reason, rej.field, rej.limit, rej.actual, rej.message))
            raise _RollBack
    except _RollBack:
        pass
    finally:
        await conn.close()
    return out


class _RollBack(Exception):
    """Ends the parity transaction without storing its jobs."""


def test_the_local_validation_cases_get_one_verdict_through_sql_and_grpc(cluster_factory: ClusterFactory) -> None:
    import asyncio

    cases, table = local_validation_cases()
    queues = {"enc": {"limits": table.QLIM.model_dump(mode="json")},
              "open": {"limits": table.OPEN.model_dump(mode="json")}}
    nodes = cluster_factory(1, strict=True, limits=table.LIM.model_dump(mode="json"), queues=queues)
    node = nodes[0]
    shift = time.time_ns() - table.NOW  # the table's "now" is fixed; both paths read the clock
    named_cases = [(name, req, expected) for name, req, expected in cases if name not in NOT_IN_SQL]
    reqs = []
    for _, req, _ in named_cases:
        moved = pb.EnqueueRequest()
        moved.CopyFrom(req)
        if moved.HasField("scheduled_at") and -62135596800 < moved.scheduled_at.seconds < 253402300799:
            at = moved.scheduled_at.seconds * 10**9 + moved.scheduled_at.nanos + shift
            moved.scheduled_at.seconds, moved.scheduled_at.nanos = divmod(at, 10**9)
        reqs.append(moved)
    w = Wire(node.grpc_target)
    try:
        resp = w.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=reqs), timeout=30)
    finally:
        w.close()
    through_grpc = [None if r.WhichOneof("outcome") == "ack" else _grpc_verdict(r.rejection) for r in resp.results]
    through_sql = asyncio.run(_sql_verdicts(nodes.schema, reqs))
    for (name, _, expected), g, s in zip(named_cases, through_grpc, through_sql, strict=True):
        if g is not None and g[0] == "SCHEDULED_TOO_FAR" and s is not None:  # actual: as each path measured it
            g, s = (*g[:3], None, g[4]), (*s[:3], None, s[4])
        assert s == g, f"{name}: SQL {s} != gRPC {g}"
        if expected is None:
            assert g is None, name
        else:
            got = g[:4] if g is not None else None
            if expected[0] == "SCHEDULED_TOO_FAR":  # actual: seconds ahead as each path measured it
                assert got is not None and got[:3] == expected[:3], name
            else:
                assert got == expected, name
