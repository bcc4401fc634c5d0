"""A rejection for a limit says how to raise it, and doing what it says works.

Per-queue limits (payload size, custom map, allowed encodings) end their message with the
``sepp queues update QUEUE --flag N`` that raises them: the test runs that very command
(the CLI in process, against a real server) with N = the rejection's ``actual`` and sends
the job again, which is then stored. Server-wide limits end theirs with the ``[limits]``
key and its ``SEPP_LIMITS__…`` variable: the test restarts the server with each variable
set to the ``actual`` and sends every job again. The limits are checked in the client and
the server alike (same code), so this is backend-independent: SQLite only.
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
_QUEUE_FIX = re.compile(r"; to (?:raise|allow) it: (sepp queues update \S+ --[a-z-]+ (?:N|LABEL))")
_SERVER_FIX = re.compile(r"; to raise it: set \[limits\] ([a-z_]+) in the server's config \((SEPP_LIMITS__[A-Z_]+)\)$")


def _rejection(client: Client, req: EnqueueRequest) -> Rejection:
    with pytest.raises(RejectedError) as info:
        client.enqueue(req)
    return info.value.rejection


def test_a_queue_limit_rejection_names_the_command_that_raises_it(server_factory: ServerFactory) -> None:
    server = server_factory(queues={"tight": {"limits": {
        "max_payload_bytes": 10, "max_custom_entries": 1, "max_custom_key_bytes": 4, "max_custom_bytes": 20,
        "allowed_encodings": ["text/plain"]}}})
    _register()
    runner = CliRunner()
    jobs = {
        "--max-payload-bytes": EnqueueRequest("tight", "t", payload=Payload(b"x" * 11, "text/plain")),
        "--max-custom-entries": EnqueueRequest("tight", "t", custom={"a": 1, "b": 2}, payload=TEXT),
        "--max-custom-key-bytes": EnqueueRequest("tight", "t", custom={"abcde": 1}, payload=TEXT),
        "--max-custom-bytes": EnqueueRequest("tight", "t", custom={"k": "v" * 20}, payload=TEXT),
        "--allowed-encoding": EnqueueRequest("tight", "t", payload=Payload(b"{}", "application/json")),
    }
    with Client(server.grpc_target, options=SERVER_ONLY) as client:
        for flag, req in jobs.items():
            rejection = _rejection(client, req)
            found = _QUEUE_FIX.search(rejection.message)
            assert found, (flag, rejection.message)
            words = found.group(1).split()
            assert words[:4] == ["sepp", "queues", "update", "tight"] and words[4] == flag, words
            value = "application/json" if words[5] == "LABEL" else str(rejection.actual)
            result = runner.invoke(app, [*words[1:5], value, "--server", server.grpc_target])
            assert result.exit_code == 0, (words, result.output)
            assert client.enqueue(req).job_id, flag  # what the message said to do was enough


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
