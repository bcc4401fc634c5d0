"""A wrong address fails at once with its cause; a client that got through rides out restarts.

A process's first call to an address it never reached a server at, where nothing can be
connected to, raises ``Unavailable`` (``not_sent``) at once naming the address and the cause
— ``connection refused: is sepp running on …?``, sepp's HTTP port — instead of waiting out
the 10 s deadline (docs/decisions.md "A first contact fails fast"). An address reached before
is waited for as a restarting server (test_client_restart.py has the long version). The
bounds are generous for a loaded machine and still far from the 10 s deadline they replace.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from support.servers import FAST, ServerFactory, unreached_port
from support.worker import until
from typer.testing import CliRunner

from sepp import AsyncClient, Client, ClientOptions, EnqueueRequest, Worker
from sepp.cli.main import _register, app
from sepp.client.admin import AdminClient
from sepp.client.target import has_reached
from sepp.errors import Unavailable
from sepp.testing import ServerProcess, free_port

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.sqlite_only(reason="backend-neutral: what a client does before and after it reached a server"),
]

#: Most seconds a fail-fast call may take on a loaded machine; the wait it replaces is
#: ``ClientOptions().timeout`` (10 s).
AT_ONCE = 3.0

runner = CliRunner()
_register()  # every command, with the TLS options and the --server check, as ``sepp`` runs them


def _refused(target: str) -> str:
    return f"connection refused: is sepp running on {target}? (nothing was sent)"


def test_the_default_deadline_is_what_failing_fast_saves() -> None:
    deadline = ClientOptions().timeout
    assert deadline == 10.0 and AT_ONCE < deadline / 3


def test_a_client_whose_address_has_nothing_listening_fails_at_once_naming_it() -> None:
    target = f"127.0.0.1:{unreached_port()}"
    started = time.monotonic()
    with Client(target) as client, pytest.raises(Unavailable) as info:
        client.enqueue(EnqueueRequest("q", "t"))
    assert time.monotonic() - started < AT_ONCE
    assert str(info.value) == _refused(target)
    assert info.value.not_sent and info.value.code == grpc.StatusCode.UNAVAILABLE
    assert not has_reached(target)


async def test_an_async_client_fails_at_once_the_same_way() -> None:
    target = f"127.0.0.1:{unreached_port()}"
    started = time.monotonic()
    async with AsyncClient(target) as client:
        with pytest.raises(Unavailable) as info:
            await client.enqueue(EnqueueRequest("q", "t"))
    assert time.monotonic() - started < AT_ONCE
    assert str(info.value) == _refused(target) and info.value.not_sent


def test_the_admin_client_names_the_cause() -> None:
    target = f"127.0.0.1:{unreached_port()}"
    with AdminClient(target) as admin, pytest.raises(Unavailable) as info:
        admin.list_queues()
    assert str(info.value) == _refused(target) and info.value.not_sent


def test_sepp_info_fails_at_once_naming_the_address_and_the_os_error() -> None:
    target = f"127.0.0.1:{unreached_port()}"
    started = time.monotonic()
    result = runner.invoke(app, ["info", "--server", target])  # the default 10 s deadline
    assert time.monotonic() - started < AT_ONCE
    assert result.exit_code == 3, result.output
    assert _refused(target) in result.stderr


def test_the_cli_in_a_process_of_its_own_fails_fast_even_with_a_long_deadline() -> None:
    """As a user runs it: with a 60 s deadline the old wait could not hide in the start-up time."""
    target = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    for args in (["info", "--timeout", "60"], ["queues", "list", "--timeout", "60"]):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "sepp", *args, "--server", target], capture_output=True,
                              text=True, env=env, timeout=60)
        assert time.monotonic() - started < 20, args
        assert done.returncode == 3, done.stderr
        assert f"connection refused: is sepp running on {target}?" in done.stderr, done.stderr


def test_sepps_http_port_is_recognised_and_named(shared_server: ServerProcess) -> None:
    http = shared_server.http_url.removeprefix("http://")
    expected = (f"{http} answered but is not a gRPC server (is it sepp's HTTP port? the gRPC port is 7700 "
                f"by default) (nothing was sent)")
    started = time.monotonic()
    with Client(http) as client, pytest.raises(Unavailable) as info:
        client.get_server_info()
    assert time.monotonic() - started < AT_ONCE
    assert str(info.value) == expected and info.value.not_sent
    result = runner.invoke(app, ["info", "--server", http])
    assert result.exit_code == 3 and expected in result.stderr


def test_a_grpc_or_http_prefix_is_accepted_and_https_without_tls_is_refused(shared_server: ServerProcess) -> None:
    target = shared_server.grpc_target
    for prefixed in (f"grpc://{target}", f"http://{target}", f"HTTP://{target}/"):
        with Client(prefixed) as client:
            assert client.target == target and client.get_server_info().version
    assert runner.invoke(app, ["info", "--server", f"http://{target}"]).exit_code == 0
    with AdminClient(f"grpc://{target}") as admin:
        assert isinstance(admin.list_queues(), list)
    with pytest.raises(ValueError, match=f"asks for TLS .* or write {target} for plaintext"):
        Client(f"https://{target}")
    refused = runner.invoke(app, ["info", "--server", f"https://{target}"])
    assert refused.exit_code == 2 and "--server" in refused.stderr and "give the server's CA" in refused.stderr
    with_path = runner.invoke(app, ["queues", "list", "--server", f"http://{target}/queues"])
    assert with_path.exit_code == 2 and "expected HOST:PORT" in with_path.stderr


def test_a_worker_keeps_trying_and_its_log_names_the_cause(caplog: pytest.LogCaptureFixture) -> None:
    """A worker is a service, often started beside its server: it does not give up, it says why."""
    target = f"127.0.0.1:{unreached_port()}"

    async def main() -> None:
        worker = Worker(target, ["q"], poll_wait=0.1, shutdown_grace=1.0)
        run = asyncio.create_task(worker.run(install_signal_handlers=False))
        await until(lambda: any(f"connection refused: is sepp running on {target}?" in r.getMessage()
                                for r in caplog.records), 10, "the reserve failure in the log")
        assert not run.done()
        await worker.stop()
        await asyncio.wait_for(run, 10)

    with caplog.at_level(logging.WARNING, logger="sepp.worker"):
        asyncio.run(main())


def test_an_address_reached_before_is_waited_for_as_a_restarting_server(server_factory: ServerFactory) -> None:
    server = server_factory(grpc_listen=f"127.0.0.1:{unreached_port()}")  # the same port after a restart
    target = server.grpc_target
    with Client(target) as client:
        client.enqueue(EnqueueRequest("reached", "t"))
    assert has_reached(target)
    server.kill()
    # A new client of this process waits for it too (the address is known to have a sepp):
    # within its deadline, then it says what the last try ran into.
    started = time.monotonic()
    with Client(target, options=ClientOptions(timeout=0.5)) as client, pytest.raises(Unavailable) as info:
        client.enqueue(EnqueueRequest("reached", "t"))
    assert time.monotonic() - started >= 0.45
    assert "no connection within the 0.5 s deadline" in str(info.value) and info.value.not_sent
    assert f"last try: connection refused: is sepp running on {target}?" in str(info.value)
    # ... and gets through once it is back, inside the default deadline.
    acked: list[str] = []
    caller = threading.Thread(target=lambda: acked.append(Client(target).enqueue(EnqueueRequest("reached", "t"))
                                                          .job_id))
    caller.start()
    server.start()
    caller.join(30)
    assert len(acked) == 1


def test_wait_for_server_start_waits_for_a_server_that_is_not_up_yet(tmp_path: Path) -> None:
    """A producer started together with its server: its first call waits (option on)."""
    target = f"127.0.0.1:{unreached_port()}"
    acked: list[str] = []
    options = ClientOptions(timeout=60, wait_for_server_start=True)

    def call() -> None:
        with Client(target, options=options) as client:
            acked.append(client.enqueue(EnqueueRequest("early", "t")).job_id)

    caller = threading.Thread(target=call)
    caller.start()  # nothing listens yet: the server below takes a second or more to start
    server = ServerProcess(tmp_path / "data", {**FAST, "grpc_listen": target})
    try:
        server.start()
        caller.join(60)
        assert len(acked) == 1
    finally:
        server.terminate()
        server.kill()
