"""One sepp per data folder; unusable folders and ports fail at start with a clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.servers import ServerFactory

from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason="the data folder and its lock (PostgreSQL needs none)")


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sepp", "serve", "--http-listen", "", *args],
                          capture_output=True, text=True, timeout=30)


def test_a_second_server_on_the_same_data_folder_refuses_to_start(server: ServerProcess) -> None:
    done = _serve("--data-dir", str(server.data_dir), "--grpc-listen", "127.0.0.1:0")
    assert done.returncode == 1
    assert server.proc is not None
    # It names the process holding the folder and what to do instead.
    assert f"in use by another sepp process (pid {server.proc.pid}): stop that one first" in done.stderr
    assert "another data folder (data_dir, --data-dir)" in done.stderr


def test_a_data_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not-a-folder"
    path.write_text("x")
    done = _serve("--data-dir", str(path), "--grpc-listen", "127.0.0.1:0")
    assert done.returncode == 1
    assert "cannot use data folder" in done.stderr


def test_a_taken_grpc_port_fails_start_and_releases_the_folder(server_factory: ServerFactory, tmp_path: Path) -> None:
    first = server_factory()
    port = first.grpc_target.rpartition(":")[2]
    folder = tmp_path / "second"
    done = _serve("--data-dir", str(folder), "--grpc-listen", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"port {port} is in use" in done.stderr and "--grpc-listen" in done.stderr
    # The failed start left the folder unlocked: a server can use it now.
    server_factory(data_dir=folder)


@pytest.mark.parametrize("flag", ["--persist-mode=fsync", "--grpc-listen=nonsense"])
def test_invalid_settings_exit_non_zero_with_a_message(tmp_path: Path, flag: str) -> None:
    done = _serve("--data-dir", str(tmp_path / "d"), flag)
    assert done.returncode != 0
    assert "sepp:" in done.stderr
