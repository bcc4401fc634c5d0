"""``sepp serve`` on a port that is taken says so in one line naming the flag to change
(docs/decisions.md "A taken port is one line"), without gRPC core's log line or its
``GRPC_VERBOSITY`` advice; a port a stopped server left in ``TIME_WAIT`` is not taken.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sepp.server.listen import in_use
from sepp.testing import ServerProcess, free_port

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.sqlite_only(reason="backend-neutral: the listeners are bound before and apart from the store"),
]


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port some process listens on (a plain socket)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def _serve(tmp_path: Path, *listen: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    return subprocess.run([sys.executable, "-m", "sepp", "serve", "--data-dir", str(tmp_path / "data"), *listen],
                          capture_output=True, text=True, env=env, timeout=60)


def test_a_listening_port_is_in_use_and_one_left_in_time_wait_is_not() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC's and sepp's HTTP listener
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    address = f"127.0.0.1:{port}"
    assert in_use(address)
    # The server side closes first, so the connection's server end sits in TIME_WAIT on the
    # port after the listener is gone: what a restarted server finds.
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()
    listener.close()
    client.close()
    with socket.socket() as plain, pytest.raises(OSError):  # the TIME_WAIT is there ...
        plain.bind(("127.0.0.1", port))
    assert not in_use(address)  # ... and a listener (SO_REUSEADDR) may bind all the same
    assert not in_use("127.0.0.1:0")  # any free port


def test_a_taken_grpc_port_is_named_with_the_flag_to_change(tmp_path: Path, held_port: int) -> None:
    done = _serve(tmp_path, "--grpc-listen", f"127.0.0.1:{held_port}", "--http-listen", "127.0.0.1:0")
    assert done.returncode == 1
    assert done.stderr.strip() == (f"sepp: cannot start: port {held_port} is in use (another sepp?); "
                                   f"choose another with --grpc-listen")
    assert "GRPC_VERBOSITY" not in done.stderr and "add_port" not in done.stderr


def test_a_taken_http_port_is_named_with_the_flag_to_change(tmp_path: Path, held_port: int) -> None:
    done = _serve(tmp_path, "--grpc-listen", "127.0.0.1:0", "--http-listen", f"127.0.0.1:{held_port}")
    assert done.returncode == 1
    assert done.stderr.strip() == (f"sepp: cannot start: port {held_port} is in use (another sepp?); "
                                   f"choose another with --http-listen")


def test_a_second_sepp_on_the_same_port_is_told_so(tmp_path: Path) -> None:
    first = ServerProcess(tmp_path / "first", {"grpc_listen": f"127.0.0.1:{free_port()}"})
    first.start()
    try:
        port = first.grpc_target.rpartition(":")[2]
        done = _serve(tmp_path, "--grpc-listen", first.grpc_target, "--http-listen", "127.0.0.1:0")
        assert done.returncode == 1
        assert f"port {port} is in use (another sepp?); choose another with --grpc-listen" in done.stderr
        assert "GRPC_VERBOSITY" not in done.stderr
    finally:
        first.terminate()
        first.kill()
