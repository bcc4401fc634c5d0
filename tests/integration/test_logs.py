"""The server's log lines: one JSON object per line with ``log_format =
"json"``, one line per significant event, never a payload byte or a secret.

One server per backend runs with an admin token and a PostgreSQL DSN carrying a password in
its config, JSON logs, a slow committer and a backlog of one (so it sheds), and goes through
every event the issue names: start, queue declared / changed / paused / resumed, jobs
dead-lettered three ways (nack, attempts exhausted, lease expired), an expired lease and an
overload. The jobs' payloads and custom values carry a marker string. Then every line the
process wrote must parse as JSON with ``ts`` (RFC 3339 UTC), ``level``, ``logger``, ``node``
and ``msg``, and none may hold the marker, the token or the password.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

import grpc
import httpx
import pytest
from support.auth import TOKENS, auth_config
from support.backends import PG_TEST_DSN
from support.servers import ServerFactory
from support.stubs import StubSet
from support.waiting import wait_for
from support.worker import Wire, fast_queue, wire_for

from sepp import Client, EnqueueRequest, Payload
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc
from sepp.testing import ServerProcess

pytestmark = pytest.mark.timeout(90)

MARKER = "PAYLOAD-MARKER-7f3a9c"
ADMIN_TOKEN = "admin-secret-4b1d5e9a"
PASSWORD = "pg-password-c0ffee42"
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def dsn_with_password(dsn: str) -> str:
    """``dsn`` (``postgresql://user@host…``) with ``PASSWORD`` as the user's password: the test
    database trusts local logins, so the password is sent and ignored."""
    scheme, rest = dsn.split("://", 1)
    user, at, host = rest.partition("@")
    assert at, dsn
    return f"{scheme}://{user}:{PASSWORD}@{host}"


def json_lines(server: ServerProcess) -> list[dict[str, Any]]:
    """Every line the server wrote but its ready line (stdout), each parsed as JSON."""
    out = []
    for line in server.output:
        if line.startswith("sepp ready "):
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    return out


async def overload(target: str, queue: str, calls: int = 12) -> int:
    """Fire ``calls`` concurrent single enqueues; how many were shed (RESOURCE_EXHAUSTED)."""
    channels = [grpc.aio.insecure_channel(target) for _ in range(calls)]
    try:
        await asyncio.gather(*(c.channel_ready() for c in channels))

        async def one(channel: grpc.aio.Channel) -> bool:
            try:
                await producer_pb2_grpc.ProducerServiceStub(channel).Enqueue(
                    pb.EnqueueRequest(queue=queue, job_type="t", payload=pb.Payload(data=MARKER.encode())), timeout=10)
            except grpc.aio.AioRpcError as err:
                return bool(err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED)
            return False

        return sum(await asyncio.gather(*(one(c) for c in channels)))
    finally:
        await asyncio.gather(*(c.close() for c in channels))


def test_json_log_lines_name_every_significant_event_and_hold_no_payload_or_secret(
        server_factory: ServerFactory, backend: str) -> None:
    dsn = dsn_with_password(PG_TEST_DSN)
    config: dict[str, Any] = {"admin_token": ADMIN_TOKEN, "log_format": "json", "max_commit_backlog": 1,
                              "debug_commit_delay": 0.05, "queues": {"declared": {}},
                              "queue_defaults": fast_queue(lease_duration=5.0)}
    # On PostgreSQL the server connects with it (the test database ignores the password); with
    # SQLite it is set but unused: never printed either way.
    server = server_factory(**config, postgres_dsn=dsn)
    queue = f"logs-{uuid.uuid4().hex[:8]}"
    admin_md = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
    w = Wire(server.grpc_target, queue=queue)
    try:
        with Client(server.grpc_target) as client:
            marked = Payload(MARKER.encode(), "text/plain")
            ids = [client.enqueue(EnqueueRequest(queue, "t", payload=marked, custom={"note": MARKER},
                                                 max_attempts=1)).job_id for _ in range(3)]
        # 1. a nack dead_letter, 2. a retry on the last attempt, 3. a lease left to expire
        first, second = w.reserve_one(), w.reserve_one()
        w.nack(first, "dead_letter", message=f"no such user (not {MARKER[:4]})")
        w.nack(second, "retry", message="boom")
        w.reserve_one(lease=0.2)
        wait_for(lambda: any(e.get("event") == "lease_expired" for e in json_lines(server)), 10,
                 what="a lease expiry line")
        # queue declared, changed, paused, resumed by an admin
        w.admin.DeclareQueue(apb.DeclareQueueRequest(name=f"{queue}-new"), timeout=10, metadata=admin_md)
        w.admin.UpdateQueue(apb.UpdateQueueRequest(name=queue, settings=pb.QueueSettings(default_priority=7)),
                            timeout=10, metadata=admin_md)
        w.admin.PauseQueue(apb.PauseQueueRequest(name=queue), timeout=10, metadata=admin_md)
        w.admin.ResumeQueue(apb.ResumeQueueRequest(name=queue), timeout=10, metadata=admin_md)
        shed = 0
        for _ in range(5):
            shed += asyncio.run(overload(server.grpc_target, f"{queue}-busy"))
            if shed:
                break
        assert shed, "the server never shed a call"
        wait_for(lambda: any(e.get("event") == "overload" for e in json_lines(server)), 15, what="an overload line")
    finally:
        w.close()
        server.terminate()
    wait_for(lambda: any(e.get("msg", "").startswith("stopped:") for e in json_lines(server)), 5, what="the last line")

    lines = json_lines(server)
    text = "\n".join(server.output)
    for secret in (MARKER, ADMIN_TOKEN, PASSWORD):
        assert secret not in text, f"{secret!r} was logged"
    for entry in lines:
        assert {"ts", "level", "logger", "node", "msg"} <= entry.keys(), entry
        assert RFC3339_UTC.match(entry["ts"]), entry["ts"]
        assert entry["level"] in ("debug", "info", "warning", "error", "critical")
        assert entry["node"] and entry["logger"].startswith(("sepp", "py.warnings")), entry
    events = [e for e in lines if "event" in e]
    (start,) = [e for e in events if e["event"] == "start"]
    assert start["config"]["admin_token"] == "***"
    assert start["config"]["storage"] == backend
    if backend == "postgres":
        assert start["config"]["postgres_dsn"] == dsn.replace(PASSWORD, "***")
    dead = {e["job_id"]: e for e in events if e["event"] == "job_dead_lettered" and "job_id" in e}
    assert {dead[ids[0]]["reason"], dead[ids[1]]["reason"]} == {"nack_dead_letter", "attempts_exhausted"}
    assert dead[ids[0]]["reason"] == "nack_dead_letter" and dead[ids[0]]["queue"] == queue
    assert dead[ids[0]]["level"] == "warning" and ids[0] in dead[ids[0]]["msg"]
    (expired_dead,) = [e for e in events if e["event"] == "job_dead_lettered" and e["reason"] == "lease_expired"]
    assert (expired_dead["queue"], expired_dead["count"]) == (queue, 1)
    (expired,) = [e for e in events if e["event"] == "lease_expired"]
    assert expired["count"] == 1 and expired["queues"] == [queue]
    by_event = {(e["event"], e.get("queue")) for e in events}
    assert {("queue_declared", "declared"), ("queue_declared", queue), ("queue_declared", f"{queue}-new"),
            ("queue_changed", queue), ("queue_paused", queue), ("queue_resumed", queue),
            ("overload", None)} <= by_event
    (changed,) = [e for e in events if e["event"] == "queue_changed"]
    assert changed["settings"] == ["default_priority"] and changed["source"] == "admin"
    (declared_by_config,) = [e for e in events if e["event"] == "queue_declared" and e["queue"] == "declared"]
    assert declared_by_config["source"] == "config"
    overloads = [e for e in events if e["event"] == "overload"]
    assert len(overloads) == 1, "overload lines are rate-limited to one per 5 s"


def test_text_log_lines_name_the_node_and_say_what_happened(server_factory: ServerFactory) -> None:
    server = server_factory(node_name="node-t", queue_defaults=fast_queue())
    queue = f"logs-{uuid.uuid4().hex[:8]}"
    with wire_for(server, queue) as w:
        job_id = w.enqueue(max_attempts=1, data=MARKER.encode())
        w.nack(w.reserve_one(), "dead_letter", message="gave up")
    wait_for(lambda: any("dead-lettered" in line for line in server.output), 5, what="the dead-letter line")
    (line,) = [line for line in server.output if "dead-lettered" in line]
    assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING sepp\.engine \[node-t\]: job ", line), line
    assert f"job {job_id} of queue '{queue}' dead-lettered (nack_dead_letter, attempt 1): gave up" in line
    assert MARKER not in "\n".join(server.output)


@pytest.mark.sqlite_only(reason="backend-neutral: tokens are checked by the gRPC interceptor and the UI")
def test_json_auth_failure_lines_are_events_naming_the_call_never_a_secret(server_factory: ServerFactory) -> None:
    wrong = "wrong-secret-5e1f0a77"
    server = server_factory(**auth_config(), log_format="json")
    stubs = StubSet(server.grpc_target)
    try:  # one failure per reason (each reason is logged at most once a second)
        with pytest.raises(grpc.RpcError):  # missing
            stubs.producer.Enqueue(pb.EnqueueRequest(queue="q", job_type="t"), timeout=10)
        with pytest.raises(grpc.RpcError):  # forbidden
            stubs.admin.ListQueues(apb.ListQueuesRequest(), timeout=10,
                                   metadata=(("authorization", f"Bearer {TOKENS['producer'][0]}"),))
    finally:
        stubs.close()
    with httpx.Client(base_url=server.http_url) as web:  # unknown, at the UI's login
        form = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/login").text)
        assert form
        assert web.post("/login", data={"csrf_token": form[1], "token": wrong}).status_code == 401

    def failures() -> list[dict[str, Any]]:
        return [e for e in json_lines(server) if e.get("event") == "auth_failure"]

    wait_for(lambda: len(failures()) == 3, 5, what="three auth failure lines")
    server.terminate()
    got = failures()
    assert [(e["logger"], e["level"], e["reason"], e["method"], e["role"], e.get("token"), e["suppressed"])
            for e in got] == [
        ("sepp.auth", "warning", "missing", "/sepp.api.v1.ProducerService/Enqueue", "produce", None, 0),
        ("sepp.auth", "warning", "forbidden", "/sepp.api.v1.AdminService/ListQueues", "admin", "producer", 0),
        ("sepp.auth", "warning", "unknown", "/login", "admin", None, 0)]
    text = "\n".join(server.output)
    for secret in (wrong, *(s for s, _ in TOKENS.values())):
        assert secret not in text, f"{secret!r} was logged"
