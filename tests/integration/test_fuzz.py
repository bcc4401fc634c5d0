"""Fuzzing every RPC of every service against one real server.

One ``sepp serve`` process for the module, seeded with jobs in every state on three
declared queues (``support.fuzz.seed``). Per service (producer, worker, admin — read
from the proto descriptors, so a new RPC or service is covered without editing this file)
a bounded, derandomized hypothesis run sends a few hundred structurally valid requests
with random and extreme field values (``support.fuzz.Requests``). Ids, leases, keys and
page tokens come from real rows and from earlier answers, so calls hit real rows.

Every answer must keep the contract of ``support.fuzz.judge``. The documented status
set (``fuzz.ALLOWED_CODES``, from ``server/rpc/status.py``, ``rpc/admin.py``,
``rpc/registration.py`` and SPEC §2–§4):

* OK;
* INVALID_ARGUMENT (catalogue rejections, bad arguments, malformed requests), NOT_FOUND
  (UNKNOWN_QUEUE, JOB_NOT_FOUND, QUEUE_NOT_FOUND, IDEMPOTENCY_KEY_NOT_FOUND),
  FAILED_PRECONDITION (LEASE_MISMATCH, LEASE_EXPIRED, JOB_STATE, QUEUE_NOT_EMPTY),
  RESOURCE_EXHAUSTED (OVERLOADED), UNAVAILABLE (SHUTTING_DOWN, STORE_UNAVAILABLE), and
  ALREADY_EXISTS / ABORTED (not sent today, allowed) — each with a ``google.rpc.Status``
  in ``grpc-status-details-bin`` whose code matches and an ErrorInfo (domain ``sepp``);
* DEADLINE_EXCEEDED, the client's own deadline (no details; 20 s here, so it means a hang).

Never UNKNOWN (an exception escaped), INTERNAL (every cause the fuzzer finds is
fixed with a catalogued answer), nor UNAUTHENTICATED (this server has no admin token).
Trailers stay within 8 KiB (gRPC's default metadata limit). Afterwards
the server still serves (``fuzz.check_serving``: health, a default client enqueue, which
reads GetServerInfo first, reserve, ack) and has logged no ERROR line during the run (a
sweep pass that failed on a row the fuzzer stored).

Reserve long-polls are capped by the server's ``max_reserve_wait`` (0.2 s here), so a
wait above it is a quick INVALID_ARGUMENT and the run stays fast. Hypothesis runs
derandomized with no example database and no shrinking (the server is stateful): the
same code sends the same requests; every failing answer is collected and reported by
class with one request each, instead of stopping at the first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support import fuzz
from support.servers import backend_config

from sepp.api.v1 import admin_pb2, producer_pb2, worker_pb2
from sepp.testing import ServerProcess

SERVICES = fuzz.services()

#: Examples per service: a few hundred, and at least 30 per RPC.
MIN_EXAMPLES, PER_RPC = 300, 30


@dataclass
class Fuzzed:
    """The module's server, a channel to it and the pool of real values."""

    server: ServerProcess
    channel: grpc.Channel
    pool: fuzz.Pool
    requests: fuzz.Requests


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[Fuzzed]:
    config = {**fuzz.SERVER_CONFIG, **backend_config(backend)}
    server = ServerProcess(Path(tmp_path_factory.mktemp("fuzz")), config).start()
    channel = grpc.insecure_channel(server.grpc_target, options=(("grpc.max_send_message_length", -1),
                                                                 ("grpc.max_receive_message_length", -1)))
    pool = fuzz.Pool()
    try:
        fuzz.seed(channel, pool)
        yield Fuzzed(server, channel, pool, fuzz.Requests(pool))
    finally:
        channel.close()
        try:
            server.terminate(timeout=15)
        finally:
            server.kill()


def report(bad: list[tuple[fuzz.Verdict, Message]], total: int) -> str:
    """The failing answers by class: count, status, reason, problem, one request."""
    classes: dict[tuple[str, str, str, str], list[tuple[fuzz.Verdict, Message]]] = {}
    for verdict, request in bad:
        classes.setdefault(verdict.failure_class, []).append((verdict, request))
    lines = [f"{len(bad)} of {total} answers break the contract, in {len(classes)} classes:"]
    for (rpc, code, reason, _), members in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        verdict, request = members[0]
        lines.append(f"- {rpc} {code} reason={reason or '-'} x{len(members)}: {verdict.problem}\n"
                     f"    message: {verdict.message[:300]!r}\n    request: {fuzz.show(request, 400)}")
    return "\n".join(lines)


def fuzz_rpcs(fuzzed: Fuzzed, rpcs: st.SearchStrategy[fuzz.Rpc], expected: list[fuzz.Rpc], examples: int) -> None:
    """Seed real rows, send ``examples`` fuzzed requests to the RPCs ``rpcs`` draws, then
    assert the server still serves, logged no error (a failed sweep pass, say) and every
    answer kept the contract (all failing answers reported by class)."""
    fuzz.seed(fuzzed.channel, fuzzed.pool)  # fresh rows and settings: earlier runs may have purged them
    caller = fuzz.Caller(fuzzed.channel)
    seen: list[tuple[fuzz.Verdict, Message]] = []
    log_start = len(fuzzed.server.output)

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data: st.DataObject) -> None:
        rpc = data.draw(rpcs, label="rpc")
        request = data.draw(fuzzed.requests.request(rpc), label="request")
        seen.append((caller.call(rpc, request, fuzzed.pool), request))

    run()

    assert fuzzed.server.proc is not None and fuzzed.server.proc.poll() is None, "the server exited"
    fuzz.check_serving(fuzzed.server.grpc_target)
    calls = Counter(verdict.rpc for verdict, _ in seen)
    assert all(calls[rpc.label] >= 1 for rpc in expected), f"RPCs never called: {calls}"
    bad = [(verdict, request) for verdict, request in seen if verdict.problem is not None]
    assert not bad, report(bad, len(seen))
    errors = fuzz.server_errors(fuzzed.server.output[log_start:])
    assert not errors, f"the server logged errors: {dict(errors)}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_rpc_of_a_service_answers_within_the_documented_status_set(fuzzed: Fuzzed, service: str) -> None:
    rpcs = SERVICES[service]
    fuzz_rpcs(fuzzed, st.sampled_from(rpcs), rpcs, max(MIN_EXAMPLES, PER_RPC * len(rpcs)))


@pytest.mark.timeout(300)
def test_rpcs_of_all_services_mixed_answer_within_the_documented_status_set(fuzzed: Fuzzed) -> None:
    """Admin settings, producer and worker calls in one run: a setting stored by one call
    must not break another's answer."""
    fuzz_rpcs(fuzzed, fuzz.any_rpc(), [], MIN_EXAMPLES + 100)


def test_the_fuzzer_covers_every_rpc_of_every_service() -> None:
    found = {rpc.label for rpc in fuzz.rpcs()}
    assert {"ProducerService", "WorkerService", "AdminService"} <= set(SERVICES)
    assert {"ProducerService.Enqueue", "WorkerService.Settle", "AdminService.DeleteJob"} <= found
    declared = [service for module in (admin_pb2, producer_pb2, worker_pb2)
                for service in module.DESCRIPTOR.services_by_name.values()]
    assert len(found) + len(fuzz.STREAMING) == sum(len(service.methods) for service in declared)
