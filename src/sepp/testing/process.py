"""``ServerProcess``: a real ``sepp serve`` subprocess on loopback ports, for tests and benchmarks.

It writes the config to a TOML file in the data folder, starts ``python -m sepp serve``,
waits for the ``sepp ready`` line and exposes the bound addresses. ``kill()`` is
SIGKILL (crash), ``terminate()`` SIGTERM (graceful), ``restart()`` starts again on the
same data folder.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_READY = re.compile(r"sepp ready grpc=(\S+) http=(\S+)")
#: The ``tls=off|on|mtls`` field of the ready line.
_TLS = re.compile(r" tls=(off|on|mtls)\b")


def wait_exit(proc: subprocess.Popen[Any], timeout: float) -> int:
    """``proc.wait(timeout)``, woken the moment the process exits: ``Popen.wait`` with a
    timeout polls, sleeping up to 50 ms between looks (measured: a SIGTERM stop of
    ``sepp serve`` seen 0.064 s or 0.114 s after the signal, as the poll fell). On Linux a
    pidfd becomes readable when the process exits; elsewhere, or when the process was
    already reaped, this is ``proc.wait(timeout)``. Raises ``subprocess.TimeoutExpired``."""
    if proc.returncode is None and hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError:  # already reaped (or pidfds unavailable): Popen knows
            pass
        else:
            try:
                # poll, not select: a test process may hold descriptors past select's 1024.
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                if not poller.poll(max(0.0, timeout) * 1000):
                    raise subprocess.TimeoutExpired(proc.args, timeout)
            finally:
                os.close(fd)
    return proc.wait(timeout)


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}" = {_toml_value(v)}' for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def to_toml(config: dict[str, Any]) -> str:
    """A small TOML writer: top-level keys plus inline tables for nested dicts."""
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in config.items())


class ServerProcess:
    """A ``sepp serve`` child process.

    ``config`` holds ServerConfig keys (nested dicts for ``limits``, ``queues``,
    ``queue_defaults``). ``grpc_listen``/``http_listen`` default to free loopback ports.
    Readiness is the ``sepp ready`` line (no probe over the network), so a server with
    ``tls_cert`` / ``tls_key`` (and ``tls_client_ca``) starts the same way; ``tls`` then says
    ``on`` / ``mtls`` and ``http_url`` is ``https://…``. ``ready_timeout``: seconds
    to wait for that line (a hang guard: a start that fails exits and is reported at once;
    20 s was exceeded on a loaded 2-core machine, where imports alone crawl).
    """

    def __init__(self, data_dir: Path, config: dict[str, Any] | None = None, *, env: dict[str, str] | None = None,
                 ready_timeout: float = 60.0) -> None:
        self.data_dir = Path(data_dir)
        self.config = dict(config or {})
        self.env = env or {}
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.grpc_target = ""
        self.http_url = ""
        self.output: list[str] = []
        #: The ready line's ``tls`` field: ``off``, ``on`` (TLS) or ``mtls`` (client
        #: certificates required); ``http_url`` is ``https://…`` unless ``off``.
        self.tls = "off"

    def start(self, **overrides: Any) -> ServerProcess:
        """Start (or start again) and wait until it serves. Raises ``RuntimeError`` on failure."""
        self.config.update(overrides)
        cfg = {"data_dir": str(self.data_dir), "grpc_listen": "127.0.0.1:0", "http_listen": "127.0.0.1:0",
               **self.config}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / "test-config.toml"
        path.write_text(to_toml(cfg), "utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        self.output = []
        self.proc = subprocess.Popen([sys.executable, "-m", "sepp", "serve", "--config", str(path)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line.rstrip("\n"))
                match = _READY.search(line)
                if match:
                    tls = _TLS.search(line)
                    self.tls = tls[1] if tls else "off"
                    self.grpc_target = match[1]
                    self.http_url = f"{'http' if self.tls == 'off' else 'https'}://{match[2]}"
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout
        while not ready.wait(0.02):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("sepp serve did not start:\n" + "\n".join(self.output[-30:]))
        return self

    def kill(self) -> None:
        """SIGKILL: a crash at an arbitrary moment."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            wait_exit(self.proc, 10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a graceful exit; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return wait_exit(self.proc, timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return int(self.proc.returncode)

    def restart(self, **overrides: Any) -> ServerProcess:
        """Stop gracefully (if running) and start again on the same data folder."""
        self.terminate()
        return self.start(**overrides)

    @property
    def pid(self) -> int:
        """The child's pid."""
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.terminate()
        finally:
            self.kill()
