"""The Python clients with tokens: ``token=`` and ``SEPP_TOKEN`` on ``Client``,
``AsyncClient``, ``Worker`` and ``AdminClient``; a refused token is ``Unauthenticated`` /
``PermissionDenied`` (the transport family) with a clear message, and is never retried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from support.auth import TOKENS, auth_config
from support.servers import module_server

from sepp import AsyncClient, Client, ClientOptions, EnqueueRequest, Job, RetryPolicy, Worker
from sepp.client.admin import AdminClient
from sepp.errors import AdminError, PermissionDenied, RefusedError, TransportError, Unauthenticated
from sepp.testing import ServerProcess

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.sqlite_only(reason=(
        "backend-neutral: tokens are sent by the clients and checked before any store call")),
]

PRODUCE, WORK, ADMIN = (TOKENS[n][0] for n in ("producer", "worker", "admin"))
#: A retry policy that would make any retry visible: 2 s before the first one.
#: Any retry would first wait 10 s: a refusal answered well within that was not retried.
SLOW_RETRY = ClientOptions(retry=RetryPolicy(max_attempts=4, initial_backoff=10.0, max_backoff=10.0, jitter=0.0),
                           timeout=5.0)


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, **auth_config())


@pytest.fixture(autouse=True)
def no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEPP_TOKEN", raising=False)


def test_client_with_token_enqueues_and_reads_server_info(locked: ServerProcess) -> None:
    with Client(locked.grpc_target, token=PRODUCE) as client:
        assert client.get_server_info().version
        assert client.enqueue(EnqueueRequest("auth-client", "t")).job_id


def test_client_reads_sepp_token_when_no_token_is_given(locked: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEPP_TOKEN", PRODUCE)
    with Client(locked.grpc_target) as client:
        assert client.enqueue(EnqueueRequest("auth-client-env", "t")).job_id
    with Client(locked.grpc_target, token="", options=SLOW_RETRY) as client:  # "": explicitly none
        with pytest.raises(Unauthenticated):
            client.get_server_info()


def test_a_missing_token_is_unauthenticated_at_once_and_not_retried(locked: ServerProcess) -> None:
    with Client(locked.grpc_target, options=SLOW_RETRY) as client:
        started = time.monotonic()
        with pytest.raises(Unauthenticated) as caught:
            client.enqueue(EnqueueRequest("auth-client", "t", idempotency_key="k"))  # keyed: retried if transient
        assert time.monotonic() - started < 5.0  # a retry would have waited 10 s first
    err = caught.value
    assert isinstance(err, TransportError) and not isinstance(err, RefusedError) and not err.transient
    assert err.reason == "UNAUTHENTICATED" and "role 'produce'" in err.message and "SEPP_TOKEN" in err.message


@pytest.mark.parametrize(("value", "carried"), [
    (PRODUCE, "without the 'Bearer ' prefix"),
    (f"Token {PRODUCE}", "another scheme than 'Bearer'"),
])
def test_an_authorization_header_without_bearer_is_told_the_form_it_must_have(
        locked: ServerProcess, value: str, carried: str) -> None:
    """``authorization: <secret>`` (set by hand through metadata) was "carried no token"."""
    options = ClientOptions(metadata=(("authorization", value),))
    with Client(locked.grpc_target, token="", options=options) as client, pytest.raises(Unauthenticated) as caught:
        client.get_server_info()
    message = caught.value.message
    assert carried in message and "must be 'authorization: Bearer <token>'" in message
    assert "no token" not in message and PRODUCE not in message  # the secret is never echoed
    right = ClientOptions(metadata=(("authorization", f"Bearer {PRODUCE}"),))
    with Client(locked.grpc_target, token="", options=right) as client:
        assert client.get_server_info().version


def test_a_token_without_the_role_is_permission_denied_naming_the_role(locked: ServerProcess) -> None:
    with Client(locked.grpc_target, token=WORK, options=SLOW_RETRY) as client:
        started = time.monotonic()
        with pytest.raises(PermissionDenied) as caught:
            client.get_server_info()
        assert time.monotonic() - started < 5.0
    err = caught.value
    assert isinstance(err, TransportError) and not err.transient and err.reason == "PERMISSION_DENIED"
    assert "'worker'" in err.message and "needs role 'produce'" in err.message and WORK not in err.message


def test_a_token_that_cannot_travel_in_metadata_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        Client("127.0.0.1:1", token="two words")
    with pytest.raises(ValueError, match="token="):
        Worker("127.0.0.1:1", ["q"], token="caf\u00e9")


async def test_async_client_with_token_and_with_sepp_token(locked: ServerProcess,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    async with AsyncClient(locked.grpc_target, token=PRODUCE) as client:
        assert (await client.enqueue(EnqueueRequest("auth-aio", "t"))).job_id
    monkeypatch.setenv("SEPP_TOKEN", ADMIN)  # known, but not a producer
    async with AsyncClient(locked.grpc_target, options=SLOW_RETRY) as client:
        started = time.monotonic()
        with pytest.raises(PermissionDenied):
            await client.enqueue(EnqueueRequest("auth-aio", "t", idempotency_key="k"))
        assert time.monotonic() - started < 5.0


async def test_worker_with_a_work_token_runs_jobs(locked: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(locked.grpc_target, token=PRODUCE) as client:
        ids = {client.enqueue(EnqueueRequest("auth-work", "t")).job_id for _ in range(3)}
    monkeypatch.setenv("SEPP_TOKEN", WORK)  # read by the constructor
    worker = Worker(locked.grpc_target, ["auth-work"], poll_wait=0.2)
    done: set[str] = set()
    finished = asyncio.Event()

    @worker.handler("t")
    async def handle(job: Job) -> None:
        done.add(job.id)
        if done >= ids:
            finished.set()

    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await asyncio.wait_for(finished.wait(), 10)
    await worker.stop(5.0)
    await asyncio.wait_for(task, 10)
    assert worker.stats["completed"] == 3


@pytest.mark.parametrize(("token", "error"), [(PRODUCE, PermissionDenied), ("", Unauthenticated)])
async def test_worker_with_a_refused_token_stops_and_raises(locked: ServerProcess, token: str,
                                                            error: type[Exception]) -> None:
    worker = Worker(locked.grpc_target, ["auth-work-refused"], poll_wait=0.2, token=token)
    started = time.monotonic()
    with pytest.raises(error) as caught:
        await asyncio.wait_for(worker.run(install_signal_handlers=False), 10)
    assert time.monotonic() - started < 5  # not retried with backoff until stopped
    assert "role 'work'" in str(caught.value) and not worker.running


def test_admin_client_with_token_env_and_refusals(locked: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    with AdminClient(locked.grpc_target, token=ADMIN) as admin:
        assert isinstance(admin.list_queues(), list)
    monkeypatch.setenv("SEPP_TOKEN", ADMIN)
    with AdminClient(locked.grpc_target) as admin:
        assert isinstance(admin.list_queues(), list)
    with AdminClient(locked.grpc_target, token=PRODUCE) as admin, pytest.raises(PermissionDenied) as denied:
        admin.list_queues()
    assert "needs role 'admin'" in denied.value.message and not isinstance(denied.value, AdminError)
    with AdminClient(locked.grpc_target, token="nope") as admin, pytest.raises(Unauthenticated):
        admin.list_queues()
