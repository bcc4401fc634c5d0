"""A server restart is invisible to a client within its deadline (issue 15 item 6).

A real ``sepp serve`` on one fixed port is restarted 10 times with SIGTERM and 10 times with
SIGKILL while producer loops with default ``ClientOptions`` run against it: one with an
idempotency key per job, one without. Calls wait for the connection (``wait_for_ready``,
short reconnect backoff) and a call refused at connect is retried even without a key, so:
the keyed loop has no failed call and no job stored twice; a brand-new ``Client`` created
while the server is down gets its first call through once the server is back; and the
unkeyed loop fails only calls that were in flight when the server went away (they may have
been stored, so they are not retried: docs/decisions.md "What a client retries") — never
one that was refused at connect.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import FAST

from sepp import Client, EnqueueRequest
from sepp.client._core import never_sent
from sepp.client.admin import AdminClient
from sepp.errors import SeppError
from sepp.testing import ServerProcess
from sepp.testing.process import free_port

pytestmark = pytest.mark.slow

ROUNDS = 10


class _Producer(threading.Thread):
    """Enqueues one job after another into ``queue`` (keyed or not) until ``stop``."""

    def __init__(self, target: str, queue: str, *, keyed: bool) -> None:
        super().__init__(daemon=True)
        self.target, self.queue, self.keyed = target, queue, keyed
        self.stop = threading.Event()
        self.acked: dict[str, str] = {}  # key (or call number) -> job id
        self.deduplicated = 0
        self.failures: list[str] = []
        self.never_sent = 0  # failures that provably never reached the server

    def run(self) -> None:
        with Client(self.target) as client:
            i = 0
            while not self.stop.is_set():
                name = f"{self.queue}-{i}"
                req = EnqueueRequest(self.queue, "t", idempotency_key=name if self.keyed else None)
                try:
                    ack = client.enqueue(req)
                except SeppError as exc:
                    self.failures.append(f"call {i}: {type(exc).__name__}: {exc}")
                    self.never_sent += bool(getattr(exc, "not_sent", False))
                else:
                    self.acked[name] = ack.job_id
                    self.deduplicated += ack.deduplicated
                i += 1
                time.sleep(0.002)


def _first_call_of_a_new_client(target: str, out: list[str]) -> None:
    try:
        with Client(target) as client:
            out.append(client.enqueue(EnqueueRequest("fresh", "t")).job_id)
    except SeppError as exc:
        out.append(f"failed: {type(exc).__name__}: {exc}")


def test_producers_see_no_failure_across_sigterm_and_kill_9_restarts(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", {**FAST, "grpc_listen": f"127.0.0.1:{free_port()}"})
    server.start()
    target = server.grpc_target
    keyed = _Producer(target, "keyed", keyed=True)
    plain = _Producer(target, "plain", keyed=False)
    fresh: list[str] = []
    try:
        keyed.start()
        plain.start()
        for round_ in range(2 * ROUNDS):
            while len(keyed.acked) < 5 * (round_ + 1):  # some traffic before every restart
                time.sleep(0.005)
            if round_ < ROUNDS:
                server.terminate()
            else:
                server.kill()
            newcomer = threading.Thread(target=_first_call_of_a_new_client, args=(target, fresh))
            newcomer.start()  # its first call is made while nothing listens
            time.sleep(0.05)
            server.start()
            newcomer.join(30)
        time.sleep(0.1)
    finally:
        keyed.stop.set()
        plain.stop.set()
        keyed.join(30)
        plain.join(30)
    try:
        assert keyed.failures == [], keyed.failures
        assert plain.never_sent == 0, plain.failures
        assert len(plain.failures) <= 2 * ROUNDS, plain.failures  # at most the one in flight per restart
        assert len(fresh) == 2 * ROUNDS and not [f for f in fresh if f.startswith("failed")], fresh
        with AdminClient(target) as admin:
            stats = {s.queue: s for s in admin.queue_stats(["keyed", "plain", "fresh"])}
        # Every keyed job exactly once: one stored job per distinct key acknowledged.
        assert stats["keyed"].ready == len(keyed.acked) == len(set(keyed.acked.values()))
        assert stats["plain"].ready >= len(plain.acked)
        assert stats["fresh"].ready == 2 * ROUNDS
    finally:
        server.terminate()
        server.kill()


@pytest.mark.parametrize(("details", "expected"), [
    ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused", True),
    ("Connection refused", True),
    ("Socket closed", False),
    ("recvmsg:Connection reset by peer", False),
    ("", False),
])
def test_only_a_call_that_got_no_connection_counts_as_never_sent(details: str, expected: bool) -> None:
    assert never_sent(details) is expected
