"""``sepp jobs list --where KEY=VALUE`` in subprocesses against a real
server: custom-map entries written on the enqueue path and found by the index, repeated
--where as AND, AND with the other filters, --error and --key, and bad input as exit 2
with a message (malformed --where before any call; an over-long value refused by the
server as INVALID_ARGUMENT)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.admin import connect
from support.servers import backend_config

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc
from sepp.testing import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module."""
    with ServerProcess(Path(tmp_path_factory.mktemp("cli-search")), backend_config(backend)) as proc:
        yield proc


def sepp(*args: str, server: str) -> subprocess.CompletedProcess[str]:
    """Run ``sepp ARGS --server SERVER`` without a terminal (as tests/acceptance/test_cli_admin.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")} | {"COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "sepp", *args, "--server", server], capture_output=True, text=True,
                          env=env, timeout=60, input="")


def _enqueue(target: str, queue: str, job_type: str = "t", key: str = "", **custom: Any) -> str:
    req = pb.EnqueueRequest(queue=queue, job_type=job_type, idempotency_key=key)
    for name, value in custom.items():
        kind = {bool: "bool_value", int: "int_value", float: "float_value", str: "string_value"}[type(value)]
        setattr(req.custom[name], kind, value)
    with grpc.insecure_channel(target) as ch:
        return str(producer_pb2_grpc.ProducerServiceStub(ch).Enqueue(req).job_id)


def _ids(*args: str, server: str) -> list[str]:
    result = sepp("jobs", "list", *args, "--json", server=server)
    assert result.returncode == 0, result.stderr + result.stdout
    return [j["id"] for j in json.loads(result.stdout)["jobs"]]


def test_jobs_list_where_finds_custom_entries_anded_with_every_filter(srv: ServerProcess) -> None:
    target = srv.grpc_target
    as_int = _enqueue(target, "s1", "mail", user_id=42, vip=True)
    as_text = _enqueue(target, "s2", "sms", user_id="42")
    _enqueue(target, "s1", "mail", user_id=7, vip=True)
    _enqueue(target, "s1", "mail")
    assert _ids("--where", "user_id=42", server=target) == [as_int, as_text]  # the value compared as text
    assert _ids("--where", "user_id=42", "--where", "vip=true", server=target) == [as_int]
    assert _ids("--where", "user_id=42", "--queue", "s2", server=target) == [as_text]
    assert _ids("--where", "user_id=42", "--type", "mail", "--state", "ready", server=target) == [as_int]
    assert _ids("--where", "user_id=4", server=target) == []

    with connect(target) as stubs:
        dead = stubs.dead_letter("s3", error="no luck")
    assert _ids("--error", "NO LUCK", server=target) == [dead]
    keyed = _enqueue(target, "s4", key="order-9")
    assert _ids("--key", "order-9", server=target) == [keyed]

    table = sepp("jobs", "list", "--where", "user_id=42", server=target)
    assert table.returncode == 0 and as_int in table.stdout and as_text in table.stdout


@pytest.mark.sqlite_only(reason="the CLI's and the server's refusals are backend-neutral")
def test_bad_where_input_exits_2_with_a_message(srv: ServerProcess) -> None:
    target = srv.grpc_target
    for bad, says in (("user_id", "expected KEY=VALUE"), ("=1", "key before = is empty")):
        result = sepp("jobs", "list", "--where", bad, server=target)
        assert result.returncode == 2 and says in result.stderr, result.stderr
    long = sepp("jobs", "list", "--where", "note=" + "x" * 257, "--json", server=target)
    assert long.returncode == 2, long.stderr
    err = json.loads(long.stderr)
    assert err["reason"] == "INVALID_ARGUMENT" and err["metadata"]["field"] == "custom.value"
    assert err["metadata"]["limit"] == "256" and "longer than 256 bytes" in err["error"]
    many = sepp("jobs", "list", *[a for i in range(9) for a in ("--where", f"k{i}=v")], server=target)
    assert many.returncode == 2 and "at most 8 custom terms" in many.stderr


@pytest.mark.sqlite_only(reason="a CLI note on an empty listing, backend-neutral")
def test_where_with_the_search_box_spelling_finds_nothing_and_says_how_to_write_it(srv: ServerProcess) -> None:
    target = srv.grpc_target
    _enqueue(target, "s5", "mail", tenant="acme")
    result = sepp("jobs", "list", "--where", "custom.tenant=acme", server=target)
    assert result.returncode == 0 and "No jobs match." in result.stdout, result.stderr
    assert "--where takes the custom-map key itself: --where tenant=acme, not custom.tenant=acme" in result.stderr
    plain = sepp("jobs", "list", "--where", "tenant=nobody", server=target)  # no note for a plain key
    assert plain.returncode == 0 and "No jobs match." in plain.stdout and "note:" not in plain.stderr, plain.stderr
