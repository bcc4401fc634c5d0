"""TLS and mutual TLS: a throw-away CA made in the test (``support.tls``), real
``sepp serve`` processes with ``tls_cert`` / ``tls_key`` (and ``tls_client_ca``), and every
front end over it — ``Client``, ``AsyncClient``, ``Worker``, ``AdminClient``, the CLI, HTTP —
plus the refusals (no CA, another CA, no client certificate, a stranger's certificate) and
the one-line start errors (bad path, not PEM, mismatched key, a certificate without key).

TLS lives in the front ends, not in the store: the module runs on SQLite alone (the suite's
time budget); the PostgreSQL branch of ``sepp serve`` builds the same front ends.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.servers import module_server
from support.tls import Pki, make_pki

from sepp import AsyncClient, Client, EnqueueRequest, Payload
from sepp.client import ClientOptions
from sepp.client.admin import AdminClient
from sepp.client.tls import channel_credentials
from sepp.errors import Unavailable
from sepp.testing import ServerProcess
from sepp.worker import Job, Worker

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.sqlite_only(reason=(
        "backend-neutral: TLS lives in the front ends (gRPC server, HTTP server, clients), not in "
        "the store")),
]

#: Short deadlines: a refused TLS connection never gets better by waiting (it is refused
#: at once; the deadline only has to outlast a handshake on a loaded machine).
QUICK = ClientOptions(timeout=5.0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The CA, server, client and stranger files of this module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, backend: str, pki: Pki) -> Iterator[ServerProcess]:
    """A server that serves TLS only (no client certificates asked for)."""
    yield from module_server(tmp_path_factory, backend, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key))


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory: pytest.TempPathFactory, backend: str, pki: Pki) -> Iterator[ServerProcess]:
    """A server that requires a client certificate signed by the test CA (mutual TLS)."""
    yield from module_server(tmp_path_factory, backend, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                             tls_client_ca=str(pki.ca))


def _trust(ca: Path) -> ssl.SSLContext:
    """An httpx ``verify=`` that trusts ``ca`` only."""
    return ssl.create_default_context(cafile=str(ca))


def _job(queue: str, n: int = 0) -> EnqueueRequest:
    return EnqueueRequest(queue, "tls", payload=Payload.json({"n": n}))


async def _work_one(target: str, queue: str, **tls: Any) -> Job:
    """Run a Worker over ``tls`` until it has handled one job of ``queue``; that job."""
    worker = Worker(target, [queue], poll_wait=0.5, **tls)
    done: asyncio.Future[Job] = asyncio.get_running_loop().create_future()

    @worker.handler("tls")
    async def handle(job: Job) -> None:
        if not done.done():
            done.set_result(job)

    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    try:
        return await asyncio.wait_for(done, 15)
    finally:
        await worker.stop(5.0)
        await asyncio.wait_for(task, 10)


# ---------------------------------------------------------------------- TLS


def test_the_ready_line_says_tls_and_the_http_url_is_https(tls_server: ServerProcess,
                                                          mtls_server: ServerProcess) -> None:
    assert tls_server.tls == "on" and mtls_server.tls == "mtls"
    assert tls_server.http_url.startswith("https://")
    assert any(" tls=on" in line for line in tls_server.output if line.startswith("sepp ready"))


async def test_enqueue_and_reserve_work_over_tls(tls_server: ServerProcess, pki: Pki, fresh_queue: str) -> None:
    with Client(tls_server.grpc_target, tls_ca=pki.ca) as client:
        ack = client.enqueue(_job(fresh_queue, 7))
        assert client.get_server_info().version
    job = await _work_one(tls_server.grpc_target, fresh_queue, tls_ca=pki.ca)
    assert job.id == ack.job_id and job.json() == {"n": 7}


async def test_the_async_client_and_the_admin_client_work_over_tls(tls_server: ServerProcess, pki: Pki,
                                                                  fresh_queue: str) -> None:
    async with AsyncClient(tls_server.grpc_target, tls_ca=str(pki.ca)) as client:
        results = await client.enqueue_batch([_job(fresh_queue, 1), _job(fresh_queue, 2)])
    assert len(results) == 2
    with AdminClient(tls_server.grpc_target, tls_ca=pki.ca) as admin:
        assert fresh_queue in [q.name for q in admin.list_queues()]


def test_http_healthz_and_readyz_answer_over_tls_only(tls_server: ServerProcess, pki: Pki) -> None:
    with httpx.Client(base_url=tls_server.http_url, verify=_trust(pki.ca), timeout=5) as web:
        assert web.get("/healthz").status_code == 200
        assert web.get("/readyz").json() == {"status": "ready"}
    with httpx.Client(base_url=tls_server.http_url, verify=_trust(pki.other_ca), timeout=5) as web:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            web.get("/healthz")
    plain = tls_server.http_url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):  # a TLS listener answers no plaintext request
        httpx.get(f"{plain}/healthz", timeout=5)


def test_the_ui_session_cookie_is_secure_under_tls(tls_server: ServerProcess, pki: Pki) -> None:
    with httpx.Client(base_url=tls_server.http_url, verify=_trust(pki.ca), timeout=5) as web:
        page = web.get("/enqueue")  # the first page sets the session (its CSRF token)
        cookie = page.headers.get("set-cookie", "")
        assert page.status_code == 200 and "sepp_session=" in cookie
        assert "secure" in cookie.lower()  # never sent over plain HTTP


def test_a_plaintext_client_is_refused_with_a_hint_about_tls(tls_server: ServerProcess, fresh_queue: str) -> None:
    with Client(tls_server.grpc_target, options=QUICK) as client, pytest.raises(Unavailable) as err:
        client.enqueue(_job(fresh_queue))
    assert "if it serves TLS, give its CA" in str(err.value)


def test_a_client_trusting_another_ca_is_refused_and_told_why(tls_server: ServerProcess, pki: Pki,
                                                              fresh_queue: str) -> None:
    with Client(tls_server.grpc_target, options=QUICK, tls_ca=pki.other_ca) as client:
        with pytest.raises(Unavailable) as err:
            client.enqueue(_job(fresh_queue))
    assert "TLS handshake failed (CERTIFICATE_VERIFY_FAILED" in str(err.value)
    assert err.value.not_sent


def test_grpc_health_answers_over_tls(tls_server: ServerProcess, pki: Pki) -> None:
    with grpc.secure_channel(tls_server.grpc_target, channel_credentials(pki.ca)) as channel:  # type: ignore[arg-type]
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


# ---------------------------------------------------------------------- mutual TLS


async def test_with_a_client_certificate_enqueue_and_reserve_work(mtls_server: ServerProcess, pki: Pki,
                                                                  fresh_queue: str) -> None:
    with Client(mtls_server.grpc_target, tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key) as client:
        ack = client.enqueue(_job(fresh_queue, 3))
    job = await _work_one(mtls_server.grpc_target, fresh_queue, tls_ca=pki.ca, tls_cert=pki.client_cert,
                          tls_key=pki.client_key)
    assert job.id == ack.job_id


def test_a_client_without_a_certificate_is_refused(mtls_server: ServerProcess, pki: Pki, fresh_queue: str) -> None:
    with Client(mtls_server.grpc_target, options=QUICK, tls_ca=pki.ca) as client:
        with pytest.raises(Unavailable) as err:
            client.enqueue(_job(fresh_queue))
    assert "it may require a client certificate" in str(err.value)


def test_a_certificate_from_another_ca_is_refused(mtls_server: ServerProcess, pki: Pki, fresh_queue: str) -> None:
    # The server drops the handshake: the call is Unavailable when its deadline passes (1 s).
    with Client(mtls_server.grpc_target, options=ClientOptions(timeout=1.0), tls_ca=pki.ca,
                tls_cert=pki.stranger_cert, tls_key=pki.stranger_key) as client, pytest.raises(Unavailable):
        client.enqueue(_job(fresh_queue))


async def test_a_worker_without_a_certificate_gets_no_job(mtls_server: ServerProcess, pki: Pki,
                                                         fresh_queue: str) -> None:
    with Client(mtls_server.grpc_target, tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key) as client:
        client.enqueue(_job(fresh_queue))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(_work_one(mtls_server.grpc_target, fresh_queue, tls_ca=pki.ca), 1.0)


def test_http_requires_the_client_certificate_too(mtls_server: ServerProcess, pki: Pki) -> None:
    mine = _trust(pki.ca)
    mine.load_cert_chain(pki.client_cert, pki.client_key)
    with httpx.Client(base_url=mtls_server.http_url, verify=mine, timeout=5) as web:
        assert web.get("/readyz").status_code == 200
    with httpx.Client(base_url=mtls_server.http_url, verify=_trust(pki.ca), timeout=5) as web:
        with pytest.raises(httpx.HTTPError):
            web.get("/healthz")


# ---------------------------------------------------------------------- CLI


def _sepp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    return subprocess.run([sys.executable, "-m", "sepp", *args], capture_output=True, text=True, timeout=60,
                          env={**clean, **(env or {})})


@pytest.mark.sqlite_only(reason="TLS is in the front ends, not the store: the CLI's is the same on both")
def test_the_cli_talks_tls_with_flags_or_environment(mtls_server: ServerProcess, pki: Pki) -> None:
    flags = _sepp("info", "--json", "-s", mtls_server.grpc_target, "--tls-ca", str(pki.ca),
                  "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key))
    assert flags.returncode == 0, flags.stderr
    assert '"version"' in flags.stdout
    env = _sepp("queues", "list", "-s", mtls_server.grpc_target, env={
        "SEPP_TLS_CA": str(pki.ca), "SEPP_TLS_CERT": str(pki.client_cert), "SEPP_TLS_KEY": str(pki.client_key)})
    assert env.returncode == 0, env.stderr
    refused = _sepp("info", "-s", mtls_server.grpc_target, "--timeout", "1", "--tls-ca", str(pki.ca))
    assert refused.returncode == 3 and "client certificate" in refused.stderr
    # One line: gRPC's C core logs no handshake line per attempt in a client command.
    untrusted = _sepp("info", "-s", mtls_server.grpc_target, "--timeout", "2", "--tls-cert", str(pki.client_cert),
                      "--tls-key", str(pki.client_key))
    assert untrusted.returncode == 3 and len(untrusted.stderr.strip().splitlines()) == 1, untrusted.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


def test_the_cli_refuses_a_bad_tls_file_in_one_line(pki: Pki, tmp_path: Path) -> None:
    missing = _sepp("info", "--tls-ca", str(tmp_path / "nope.pem"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"error: --tls-ca: cannot read {tmp_path / 'nope.pem'}: "
                                                   "No such file or directory"]
    mismatched = _sepp("info", "--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert),
                       "--tls-key", str(pki.server_key))
    assert mismatched.returncode == 2 and len(mismatched.stderr.strip().splitlines()) == 1
    assert "does not match the certificate" in mismatched.stderr


def test_python_constructors_refuse_bad_tls_files_with_one_line(pki: Pki, tmp_path: Path) -> None:
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello\n")
    with pytest.raises(ValueError, match=r"^tls_ca: .* is not a PEM certificate"):
        Client(tls_ca=not_pem)
    with pytest.raises(ValueError, match="tls_cert is given without tls_key"):
        Worker(queues=["q"], tls_cert=pki.client_cert)
    with pytest.raises(ValueError, match="does not match"):
        AsyncClient(tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.server_key)
    with pytest.raises(ValueError, match="not both"):
        Client(options=ClientOptions(credentials=grpc.ssl_channel_credentials()), tls_ca=pki.ca)


# ---------------------------------------------------------------------- start errors


#: Bad TLS settings and the start of the one line each is refused with ({d}: the PKI folder).
BAD_SETTINGS = {
    "missing-cert": ({"tls_cert": "missing.pem", "tls_key": "server.key"},
                     "tls_cert: cannot read {d}/missing.pem: No such file"),
    "cert-not-pem": ({"tls_cert": "notes.txt", "tls_key": "server.key"},
                     "tls_cert: {d}/notes.txt is not a PEM certificate"),
    "key-not-pem": ({"tls_cert": "server.pem", "tls_key": "notes.txt"},
                    "tls_key: {d}/notes.txt is not a PEM private key"),
    "mismatched-key": ({"tls_cert": "server.pem", "tls_key": "client.key"},
                       "tls_key: {d}/client.key does not match the certificate in tls_cert ({d}/server.pem)"),
    "cert-without-key": ({"tls_cert": "server.pem"}, "tls_key: must be set when tls_cert is"),
    "key-without-cert": ({"tls_key": "server.key"}, "tls_key: is set but tls_cert is not"),
    "client-ca-alone": ({"tls_client_ca": "ca.pem"}, "tls_client_ca: needs tls_cert and tls_key"),
    "client-ca-not-pem": ({"tls_cert": "server.pem", "tls_key": "server.key", "tls_client_ca": "notes.txt"},
                          "tls_client_ca: {d}/notes.txt is not a PEM certificate"),
}
#: The cases run through a real ``sepp serve`` (exit code, one stderr line, nothing opened);
#: the others are checked in-process by the same functions ``sepp serve`` calls.
IN_A_PROCESS = ("missing-cert", "cert-not-pem", "mismatched-key", "cert-without-key")


def _files(pki: Pki, files: dict[str, str]) -> dict[str, str]:
    folder = pki.ca.parent
    (folder / "notes.txt").write_text("not a certificate\n")
    return {key: str(folder / name) for key, name in files.items()}


@pytest.mark.parametrize("case", IN_A_PROCESS)
def test_a_bad_tls_setting_is_a_one_line_start_error(pki: Pki, tmp_path: Path, case: str) -> None:
    files, expected = BAD_SETTINGS[case]
    flags = [arg for key, path in _files(pki, files).items() for arg in (f"--{key.replace('_', '-')}", path)]
    run = _sepp("serve", "--data-dir", str(tmp_path / "data"), "--grpc-listen", "127.0.0.1:0",
                "--http-listen", "127.0.0.1:0", *flags)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("sepp: invalid configuration: " + expected.format(d=pki.ca.parent)), lines[0]
    assert not (tmp_path / "data").exists()  # refused before anything was opened or bound


@pytest.mark.parametrize("case", [name for name in BAD_SETTINGS if name not in IN_A_PROCESS])
def test_every_other_bad_tls_setting_is_refused_naming_its_key(pki: Pki, case: str) -> None:
    from sepp.server.config import ConfigError, load_config
    from sepp.server.tls import load_server_tls

    files, expected = BAD_SETTINGS[case]
    with pytest.raises(ConfigError) as err:
        load_server_tls(load_config(None, **_files(pki, files)))
    assert str(err.value).startswith(expected.format(d=pki.ca.parent))
    assert "\n" not in str(err.value)
