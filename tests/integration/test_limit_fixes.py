"""A rejection for a limit says how to raise it, and doing what it says works.

Per-queue limits (payload size, custom map, allowed encodings) end their message with the
``sepp queues declare QUEUE --flag N`` that raises them: the test runs that very command
(the CLI in process, against a real server) with N = the rejection's ``actual`` and sends
the job again, which is then stored — on a queue that exists and on one that does not yet
(the refused job did not create it). Server-wide limits end theirs with the ``[limits]``
key and its ``SEPP_LIMITS__…`` variable: the test restarts the server with each variable
set to the ``actual`` and sends every job again (a batch over ``max_enqueue_batch``
included). The limits are checked in the client and the server alike (same code), so this
is backend-independent: SQLite only.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from support.servers import FAST, ServerFactory
from typer.testing import CliRunner

from sepp import Client, ClientOptions, EnqueueRequest, Payload, RejectedError, Rejection
from sepp.cli.main import _register, app
from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason="the limits are checked by code shared by every backend")

#: The server's verdict, not the client's local one (they are the same code; this is the wire).
SERVER_ONLY = ClientOptions(validate_locally=False)

TEXT = Payload(b"", "text/plain")
_QUEUE_FIX = re.compile(r"; to (?:raise|allow) it: (sepp queues declare \S+ --[a-z-]+ (?:N|LABEL))")
_SERVER_FIX = re.compile(r"; to raise it: set \[limits\] ([a-z_]+) in the server's config \((SEPP_LIMITS__[A-Z_]+)\)$")


def _rejection(client: Client, req: EnqueueRequest) -> Rejection:
    with pytest.raises(RejectedError) as info:
        client.enqueue(req)
    return info.value.rejection


#: Limits tight enough for small jobs to break each of them (a queue's, or the defaults').
TIGHT = {"max_payload_bytes": 10, "max_custom_entries": 1, "max_custom_key_bytes": 4, "max_custom_bytes": 20,
         "allowed_encodings": ["text/plain"]}


def _jobs_over_each_limit(queue: str) -> dict[str, EnqueueRequest]:
    """Flag of ``sepp queues declare`` → a job of ``queue`` that a ``TIGHT`` limit refuses."""
    return {
        "--max-payload-bytes": EnqueueRequest(queue, "t", payload=Payload(b"x" * 11, "text/plain")),
        "--max-custom-entries": EnqueueRequest(queue, "t", custom={"a": 1, "b": 2}, payload=TEXT),
        "--max-custom-key-bytes": EnqueueRequest(queue, "t", custom={"abcde": 1}, payload=TEXT),
        "--max-custom-bytes": EnqueueRequest(queue, "t", custom={"k": "v" * 20}, payload=TEXT),
        "--allowed-encoding": EnqueueRequest(queue, "t", payload=Payload(b"{}", "application/json")),
    }


def _run_the_fix(client: Client, target: str, flag: str, req: EnqueueRequest) -> None:
    """Send ``req``, run the command its rejection names (in process) and send it again."""
    rejection = _rejection(client, req)
    found = _QUEUE_FIX.search(rejection.message)
    assert found, (flag, rejection.message)
    words = found.group(1).split()
    assert words[:4] == ["sepp", "queues", "declare", req.queue] and words[4] == flag, words
    value = "application/json" if words[5] == "LABEL" else str(rejection.actual)
    result = CliRunner().invoke(app, [*words[1:5], value, "--server", target])
    assert result.exit_code == 0, (words, result.output)
    assert client.enqueue(req).job_id, flag  # what the message said to do was enough


def test_a_queue_limit_rejection_names_the_command_that_raises_it(server_factory: ServerFactory) -> None:
    server = server_factory(queues={"tight": {"limits": TIGHT}})
    _register()
    with Client(server.grpc_target, options=SERVER_ONLY) as client:
        for flag, req in _jobs_over_each_limit("tight").items():
            _run_the_fix(client, server.grpc_target, flag, req)


def test_the_command_works_on_a_queue_the_refused_job_did_not_create(server_factory: ServerFactory) -> None:
    # A new queue gets the defaults' limits; a job over them is refused and creates nothing,
    # so the command must create the queue (a new user's `update` said "does not exist").
    server = server_factory(queue_defaults={"limits": TIGHT})
    _register()
    with Client(server.grpc_target, options=SERVER_ONLY) as client:
        for n, flag in enumerate(_jobs_over_each_limit("any")):
            queue = f"limits-demo-{n}"
            req = _jobs_over_each_limit(queue)[flag]
            _rejection(client, req)
            assert queue not in client.get_server_info().queues
            _run_the_fix(client, server.grpc_target, flag, req)


def test_a_server_limit_rejection_names_the_key_and_variable_that_raise_it(tmp_path: Path) -> None:
    limits = {"max_schedule_horizon": 60, "max_idempotency_key_bytes": 8, "max_trace_entries": 1,
              "max_trace_value_bytes": 55, "max_attempts_ceiling": 3, "max_queue_name_bytes": 8,
              "max_job_type_bytes": 8, "max_encoding_bytes": 4}
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    jobs = {
        "max_schedule_horizon": EnqueueRequest("q", "t", scheduled_at=soon),
        "max_idempotency_key_bytes": EnqueueRequest("q", "t", idempotency_key="k" * 9),
        "max_trace_entries": EnqueueRequest("q", "t", trace_context={"tracestate": "a=1", "baggage": "b=2"}),
        "max_trace_value_bytes": EnqueueRequest("q", "t", trace_context={"baggage": "b" * 56}),
        "max_attempts_ceiling": EnqueueRequest("q", "t", max_attempts=4),
        "max_queue_name_bytes": EnqueueRequest("q" * 9, "t"),
        "max_job_type_bytes": EnqueueRequest("q", "t" * 9),
        "max_encoding_bytes": EnqueueRequest("q", "t", payload=Payload(b"x", "x" * 5)),
    }
    env: dict[str, str] = {}
    with ServerProcess(tmp_path / "small", {**FAST, "limits": limits}) as small, \
            Client(small.grpc_target, options=SERVER_ONLY) as client:
        for key, req in jobs.items():
            rejection = _rejection(client, req)
            found = _SERVER_FIX.search(rejection.message)
            assert found, (key, rejection.message)
            assert found.group(1) == key and found.group(2) == f"SEPP_LIMITS__{key.upper()}", found.groups()
            assert rejection.actual is not None
            # The horizon's actual is whole seconds ahead at the time of the check; a minute more
            # covers the time to the second server's check.
            env[found.group(2)] = str(rejection.actual + (60 if key == "max_schedule_horizon" else 0))
    with ServerProcess(tmp_path / "raised", {**FAST, "limits": limits}, env=env) as raised, \
            Client(raised.grpc_target, options=SERVER_ONLY) as client:
        for key, req in jobs.items():
            assert client.enqueue(req).job_id, key


def test_a_fixed_limit_says_it_is_fixed(server: ServerProcess) -> None:
    with Client(server.grpc_target, options=SERVER_ONLY) as client:
        rejection = _rejection(client, EnqueueRequest("q", "t", trace_context={"k" * 257: "v"}))
    assert "a fixed limit: 256 bytes" in rejection.message and "to raise it" not in rejection.message


@pytest.mark.parametrize("options", [ClientOptions(), SERVER_ONLY], ids=["local", "server"])
def test_a_batch_over_max_enqueue_batch_names_the_key_and_variable(tmp_path: Path, options: ClientOptions) -> None:
    jobs = [EnqueueRequest("q", "t")] * 5
    with ServerProcess(tmp_path / "small", {**FAST, "limits": {"max_enqueue_batch": 4}}) as small, \
            Client(small.grpc_target, options=options) as client:
        with pytest.raises(RejectedError) as info:
            client.enqueue_batch(jobs)
    rejection = info.value.rejection
    assert (rejection.field, rejection.limit, rejection.actual) == ("jobs", 4, 5)
    found = _SERVER_FIX.search(rejection.message)
    assert found and found.groups() == ("max_enqueue_batch", "SEPP_LIMITS__MAX_ENQUEUE_BATCH"), rejection.message
    assert rejection.message.startswith("a batch holds at most 4 jobs; to raise it: ")
    with ServerProcess(tmp_path / "raised", {**FAST, "limits": {"max_enqueue_batch": 4}},
                       env={found.group(2): str(rejection.actual)}) as raised, \
            Client(raised.grpc_target, options=options) as client:
        assert len(client.enqueue_batch(jobs)) == 5
