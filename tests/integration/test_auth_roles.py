"""Tokens and roles on every gRPC service: one server with ``[[auth.tokens]]`` per
backend, raw stubs so the wire contract (status, ErrorInfo reason, metadata, message) is what
is checked. The Python clients and the UI are in test_auth_clients.py / test_auth_ui.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from support.auth import TOKENS, auth_config
from support.failures import fails
from support.servers import module_server
from support.stubs import CALL_TIMEOUT, StubSet
from support.waiting import wait_for

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason=(
    "backend-neutral: roles are checked by the gRPC interceptor before any store call"))

LEGACY = "legacy-admin-s3cret"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, **auth_config(), admin_token=LEGACY)


Call = Callable[[StubSet, Any], Any]


def _get_info(s: StubSet, md: Any) -> Any:
    return s.producer.GetServerInfo(ppb.GetServerInfoRequest(), timeout=CALL_TIMEOUT, metadata=md)


def _enqueue(s: StubSet, md: Any) -> Any:
    return s.producer.Enqueue(pb.EnqueueRequest(queue="auth-q", job_type="t"), timeout=CALL_TIMEOUT, metadata=md)


def _reserve(s: StubSet, md: Any) -> Any:
    return s.worker.Reserve(wpb.ReserveRequest(queues=["auth-empty"], max_jobs=1, worker_id="w"),
                            timeout=CALL_TIMEOUT, metadata=md)


def _stop_reserving(s: StubSet, md: Any) -> Any:
    return s.worker.StopReserving(wpb.StopReservingRequest(worker_id="w"), timeout=CALL_TIMEOUT, metadata=md)


def _list_queues(s: StubSet, md: Any) -> Any:
    return s.admin.ListQueues(apb.ListQueuesRequest(), timeout=CALL_TIMEOUT, metadata=md)


#: One call per service (two on the producer service: GetServerInfo is in it; two on the worker
#: service: StopReserving came later) → its role.
CALLS: dict[str, tuple[Call, str]] = {
    "ProducerService/GetServerInfo": (_get_info, "produce"),
    "ProducerService/Enqueue": (_enqueue, "produce"),
    "WorkerService/Reserve": (_reserve, "work"),
    "WorkerService/StopReserving": (_stop_reserving, "work"),  # a worker ends its own long-polls
    "AdminService/ListQueues": (_list_queues, "admin"),
}


def bearer(secret: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {secret}"),)


@pytest.mark.parametrize("token", list(TOKENS))
@pytest.mark.parametrize("method", list(CALLS))
def test_each_role_opens_its_own_service_and_no_other(locked: ServerProcess, token: str, method: str) -> None:
    secret, roles = TOKENS[token]
    call, role = CALLS[method]
    stubs = StubSet(locked.grpc_target)
    try:
        if role in roles:
            assert call(stubs, bearer(secret)) is not None
            return
        failure = fails(call, stubs, bearer(secret))
        assert failure.code == grpc.StatusCode.PERMISSION_DENIED
        assert failure.reason == "PERMISSION_DENIED"
        assert failure.metadata == {"role": role, "method": f"/sepp.api.v1.{method}", "token": token}
        assert f"needs role '{role}'" in failure.message and f"{token!r}" in failure.message
        assert "SEPP_TOKEN" in failure.message and secret not in failure.message
        assert "rejection" not in failure.details  # never a rejection
    finally:
        stubs.close()


@pytest.mark.parametrize("presented", [None, "not-a-token", "s3cret-admin-but-longer", "Basic s3cret-admin",
                                       "bearer"])
@pytest.mark.parametrize("method", list(CALLS))
def test_a_missing_or_unknown_token_is_unauthenticated_naming_the_role(
        locked: ServerProcess, presented: str | None, method: str) -> None:
    call, role = CALLS[method]
    if presented is None:
        md: Any = ()
    elif " " in presented or presented == "bearer":
        md = (("authorization", presented),)  # not "Bearer <secret>": no token at all
    else:
        md = bearer(presented)
    with_stubs = StubSet(locked.grpc_target)
    try:
        failure = fails(call, with_stubs, md)
    finally:
        with_stubs.close()
    assert (failure.code, failure.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert failure.metadata == {"role": role, "method": f"/sepp.api.v1.{method}"}
    assert f"role '{role}'" in failure.message
    unknown = presented is not None and md == bearer(presented)
    malformed = presented is not None and not unknown  # an authorization entry, not "Bearer <secret>"
    if malformed:
        assert "the header must be 'authorization: Bearer <token>'" in failure.message
        assert "s3cret" not in failure.message  # what was presented may be a secret: never echoed
    else:
        assert ("an unknown token" if unknown else "no token") in failure.message


def test_the_scheme_is_case_insensitive_and_the_legacy_admin_token_is_an_admin_token(locked: ServerProcess) -> None:
    stubs = StubSet(locked.grpc_target)
    try:
        assert _list_queues(stubs, (("authorization", "bearer s3cret-admin"),)) is not None
        assert _list_queues(stubs, bearer(LEGACY)) is not None  # admin_token beside [[auth.tokens]]
        failure = fails(_enqueue, stubs, bearer(LEGACY))
        assert failure.code == grpc.StatusCode.PERMISSION_DENIED and failure.metadata["token"] == "admin_token"
    finally:
        stubs.close()


def test_health_and_reflection_stay_open_without_a_token(locked: ServerProcess) -> None:
    with grpc.insecure_channel(locked.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service="sepp.api.v1.ProducerService"),
                              timeout=CALL_TIMEOUT)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                    timeout=CALL_TIMEOUT))
        names = {s.name for s in replies[0].list_services_response.service}
        assert {"sepp.api.v1.ProducerService", "sepp.api.v1.AdminService", "grpc.health.v1.Health"} <= names


def test_a_refused_call_does_nothing_and_a_flood_is_logged_sparingly(locked: ServerProcess) -> None:
    stubs = StubSet(locked.grpc_target)

    def unknown_lines() -> list[str]:
        return [line for line in locked.output if "sepp.auth" in line and "auth failure (unknown)" in line]

    def refused() -> bool:
        """One refused enqueue; False (so ``wait_for`` keeps polling)."""
        return not fails(lambda: stubs.producer.Enqueue(pb.EnqueueRequest(queue=queue, job_type="t"),
                                             timeout=CALL_TIMEOUT, metadata=bearer("wrong-secret")))

    try:
        queue = "auth-nothing-stored"
        before = len(unknown_lines())
        started = time.monotonic()
        for _ in range(50):
            refused()
        # The suppressed count comes with the next line, a second after the last one.
        wait_for(lambda: refused() or any("more unknown failures not logged" in line for line in unknown_lines()),
                 timeout=10, interval=0.1, what="a line with the suppressed count")
        elapsed = time.monotonic() - started
        names = [q.name for q in _list_queues(stubs, bearer("s3cret-admin")).queues]
        assert queue not in names  # the refused calls never reached the engine
    finally:
        stubs.close()
    assert len(unknown_lines()) - before <= int(elapsed) + 2  # 50+ failures: at most one line a second
    assert not any("wrong-secret" in line or "s3cret" in line for line in locked.output)  # never a secret


def test_every_refusal_is_counted_in_the_auth_failures_metric(locked: ServerProcess) -> None:
    """``sepp_auth_failures_total{reason}`` moves with each refusal, by
    reason: no token, an unknown one, a known one without the role; and
    ``sepp_rpc_duration_seconds{method,code}`` with its status code."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    def failures() -> dict[str, float]:
        with urllib.request.urlopen(f"{locked.http_url}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        return {**{s.labels["reason"]: s.value for s in samples if s.name == "sepp_auth_failures_total"},
                **{s.labels["code"]: s.value for s in samples if s.name == "sepp_rpc_duration_seconds_count"
                   and s.labels["method"] == "Enqueue"}}

    before = failures()
    stubs = StubSet(locked.grpc_target)
    try:
        for md in ((), bearer("no-such-secret"), bearer("no-such-secret"), bearer(TOKENS["worker"][0])):
            fails(_enqueue, stubs, md)
    finally:
        stubs.close()
    after = failures()
    assert {r: after.get(r, 0) - before.get(r, 0) for r in ("missing", "unknown", "forbidden")} == \
        {"missing": 1, "unknown": 2, "forbidden": 1}
    # A refused call is a call too: sepp_rpc_duration_seconds has it under its code.
    assert {c: after.get(c, 0) - before.get(c, 0) for c in ("UNAUTHENTICATED", "PERMISSION_DENIED", "OK")} == \
        {"UNAUTHENTICATED": 3, "PERMISSION_DENIED": 1, "OK": 0}


def test_dependency_outcomes_needs_the_work_role_and_then_the_lease(locked: ServerProcess) -> None:
    """A worker's read of a job's dependencies (docs/workflows.md "Reading the dependencies'
    results") is a worker call: role ``work``; past the role, the job's lease is checked (here
    no such job: JOB_NOT_FOUND), so a worker token reads only the jobs it holds."""
    stubs = StubSet(locked.grpc_target)
    req = wpb.DependencyOutcomesRequest(job_id="018f0000-0000-7000-8000-000000000001",
                                        lease_id="018f0000-0000-7000-8000-000000000002")

    def read(s: StubSet, md: Any) -> Any:
        return s.worker.DependencyOutcomes(req, timeout=CALL_TIMEOUT, metadata=md)

    try:
        failure = fails(read, stubs, bearer(TOKENS["worker"][0]))
        assert (failure.code, failure.reason) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")
        failure = fails(read, stubs, bearer(TOKENS["producer"][0]))
        assert (failure.code, failure.metadata["role"]) == (grpc.StatusCode.PERMISSION_DENIED, "work")
    finally:
        stubs.close()
