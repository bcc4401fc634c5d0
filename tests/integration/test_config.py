"""Server configuration and graceful stop (SPEC §7 "Config", §5).

Covers: precedence flag > ``SEPP_*`` environment > TOML file > defaults, both through
``load_config`` and through a real ``sepp serve`` (checked with GetServerInfo),
nested keys included (``SEPP_LIMITS__MAX_ENQUEUE_BATCH`` overrides the file's value
and keeps the file's sibling keys); an invalid configuration (bad value, unknown key,
broken TOML, missing file, contradictory limits, bad queue name, bad env value, bad
flag) exits non-zero at once with a readable one-line message naming the key; SIGTERM
under enqueue load exits 0 and every acked job is there after a restart.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from support.auth import auth_config
from support.producer import connect, job
from support.servers import ServerFactory
from support.stubs import CHANNEL_OPTIONS

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc
from sepp.server.config import ConfigError, load_config
from sepp.testing import ServerProcess

FILE = """\
persist_mode = "sync"
strict = false
log_level = "warning"
sweep_interval = 0.5

[limits]
max_enqueue_batch = 100
max_attempts_ceiling = 7

[queues.emails]
default_priority = 8
"""


# ---------------------------------------------------------------- load_config


def test_load_config_takes_flags_over_env_over_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flag > env > file > default, per key; nested env keys merge with the file's table."""
    path = tmp_path / "sepp.toml"
    path.write_text(FILE, "utf-8")
    monkeypatch.setenv("SEPP_PERSIST_MODE", "async")
    monkeypatch.setenv("SEPP_STRICT", "true")
    monkeypatch.setenv("SEPP_LIMITS__MAX_ENQUEUE_BATCH", "50")
    cfg = load_config(path, persist_mode="group", strict=None, data_dir=tmp_path / "d")
    assert cfg.persist_mode == "group", "flag beats env and file"
    assert cfg.strict is True, "env beats file (the flag was not given)"
    assert cfg.limits.max_enqueue_batch == 50, "nested env beats file"
    assert cfg.limits.max_attempts_ceiling == 7, "the file's sibling key survives"
    assert cfg.log_level == "warning" and cfg.sweep_interval == 0.5, "file beats default"
    assert cfg.queues["emails"].default_priority == 8
    assert cfg.limits.max_job_type_bytes == 256 and cfg.http_listen == "127.0.0.1:7701", "defaults"
    assert cfg.data_dir == tmp_path / "d"
    monkeypatch.delenv("SEPP_PERSIST_MODE")
    assert load_config(path).persist_mode == "sync", "file when neither env nor flag"
    monkeypatch.delenv("SEPP_STRICT")
    assert load_config(path, strict=True).strict is True
    assert load_config(None).persist_mode == "group", "the default persist mode is group"


def test_load_config_reports_a_bad_value_as_config_error(tmp_path: Path) -> None:
    """A bad value is a ConfigError naming the key, not a raw pydantic error."""
    path = tmp_path / "sepp.toml"
    path.write_text('persist_mode = "fast"\n', "utf-8")
    with pytest.raises(ConfigError, match=r"persist_mode") as info:
        load_config(path)
    assert "_WithFile" not in str(info.value)


def test_load_config_takes_every_maximum_and_refuses_one_past(tmp_path: Path) -> None:
    """Windows and retentions up to 10 years, backoff up to 365 days, leases up to a
    day — at the limit the file loads; one past it is a ConfigError naming key, limit, value."""
    at = {"dedup_window": 315_360_000, "completed_retention": 315_360_000, "dead_letter_retention": 315_360_000,
          "retry_base": 31_536_000, "retry_cap": 31_536_000, "lease_duration": 86_400, "default_max_attempts": 10**6}
    path = tmp_path / "sepp.toml"
    path.write_text("[queues.edge]\n" + "".join(f"{k} = {v}\n" for k, v in at.items()), "utf-8")
    edge = load_config(path).queues["edge"]
    assert {k: getattr(edge, k) for k in at} == at
    for key, value in at.items():
        path.write_text(f"[queues.edge]\n{key} = {value + 1}\n", "utf-8")
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert f"queues.edge.{key}" in str(info.value) and str(value) in str(info.value), info.value
        assert f"got {value + 1}" in str(info.value), info.value


# ---------------------------------------------------------------- sepp serve

_READY = re.compile(r"sepp ready grpc=(\S+)")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    env.update(extra, PYTHONUNBUFFERED="1")
    return env


@contextmanager
def serve(args: list[str], env: dict[str, str]) -> Iterator[str]:
    """Run ``sepp serve ARGS`` until it prints its ready line; yield the gRPC target; SIGTERM at exit."""
    proc = subprocess.Popen([sys.executable, "-m", "sepp", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            match = _READY.search(line)
            if match:
                found.append(match[1])
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + 20
        while not ready.wait(0.02):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
        yield found[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                assert proc.wait(15) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)


def test_sepp_serve_applies_file_then_env_then_flags(tmp_path: Path) -> None:
    """The running server reports what the three layers decided, key by key."""
    path = tmp_path / "sepp.toml"
    path.write_text(FILE, "utf-8")
    base = ["--config", str(path), "--data-dir", str(tmp_path / "data"), "--grpc-listen", "127.0.0.1:0",
            "--http-listen", "127.0.0.1:0"]
    env = _env(SEPP_STRICT="true", SEPP_PERSIST_MODE="async", SEPP_LIMITS__MAX_ENQUEUE_BATCH="50")
    with serve([*base, "--persist-mode", "group"], env) as target, connect(target) as s:
        info = s.info()
        assert info.persist_mode == pb.GROUP, "flag beats env"
        assert info.strict is True, "env beats file"
        assert info.limits.max_enqueue_batch == 50 and info.limits.max_attempts_ceiling == 7
        assert [(q.name, q.declared, q.settings.default_priority) for q in info.queues] == [("emails", True, 8)]
    with serve([*base, "--no-strict"], env) as target, connect(target) as s:
        info = s.info()
        assert info.strict is False, "flag beats env"
        assert info.persist_mode == pb.ASYNC, "env beats file"
    with serve(base, _env()) as target, connect(target) as s:
        info = s.info()
        assert (info.persist_mode, info.strict, info.limits.max_enqueue_batch) == (pb.SYNC, False, 100)


INVALID = [
    ("bad value in file", 'persist_mode = "fast"\n', {}, [], ["persist_mode"]),
    ("unknown key in file", "bogus_key = 1\n", {}, [], ["bogus_key"]),
    ("broken TOML", "persist_mode = \n", {}, [], ["cannot read config file"]),
    ("limit out of range", "[limits]\nmax_enqueue_batch = 0\n", {}, [], ["limits.max_enqueue_batch"]),
    ("payload cap above message cap", "[queue_defaults.limits]\nmax_payload_bytes = 20000000\n", {}, [],
     ["max_payload_bytes", "max_message_bytes"]),
    ("bad declared queue name", '[queues.".bad"]\n', {}, [], ["'.bad'"]),
    ("bad env value", "", {"SEPP_LIMITS__MAX_ENQUEUE_BATCH": "zero"}, [], ["limits.max_enqueue_batch"]),
    ("bad flag value", "", {}, ["--persist-mode", "bogus"], ["persist_mode"]),
    ("missing file", None, {}, [], ["cannot read config file", "No such file"]),
    # Every duration and count has a maximum; the line names key, limit and value.
    ("queue window past 10 years", "[queues.archive]\ndedup_window = 1e13\n", {}, [],
     ["queues.archive.dedup_window", "315360000", "10000000000000"]),
    ("default retention past 10 years from env", "", {"SEPP_QUEUE_DEFAULTS__COMPLETED_RETENTION": "315360001"}, [],
     ["queue_defaults.completed_retention", "315360000", "315360001"]),
    ("backoff past a year", "[queue_defaults]\nretry_cap = 31536001\n", {}, [],
     ["queue_defaults.retry_cap", "31536000", "31536001"]),
    ("horizon past 10 years", "[limits]\nmax_schedule_horizon = 315360001\n", {}, [],
     ["limits.max_schedule_horizon", "315360000"]),
    ("count past int32", "[queues.q.limits]\nmax_custom_entries = 2147483648\n", {}, [],
     ["queues.q.limits.max_custom_entries", "2147483647", "2147483648"]),
]


@pytest.mark.parametrize(("content", "env", "flags", "words"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_an_invalid_config_exits_non_zero_with_a_readable_message(
        tmp_path: Path, content: str | None, env: dict[str, str], flags: list[str], words: list[str]) -> None:
    """sepp serve refuses to start: exit code ≠ 0, one ``sepp: invalid configuration`` line
    naming the key, no traceback, no pydantic internals."""
    path = tmp_path / "sepp.toml"
    if content is not None:
        path.write_text(content, "utf-8")
    done = subprocess.run([sys.executable, "-m", "sepp", "serve", "--config", str(path), "--data-dir",
                           str(tmp_path / "data"), "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                           *flags], capture_output=True, text=True, env=_env(**env), timeout=30)
    assert done.returncode != 0
    err = done.stderr.strip()
    assert err.startswith("sepp: invalid configuration:"), err
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
    for noise in ("Traceback", "_WithFile", "errors.pydantic.dev"):
        assert noise not in err, err
    assert "sepp ready" not in done.stdout


# ---------------------------------------------------------------- graceful stop


def test_sigterm_under_load_exits_0_and_keeps_every_acked_job(server_factory: ServerFactory) -> None:
    """SIGTERM while 4 producers enqueue: the process exits 0 within the grace period; after
    a restart every acked job is there, once. Failed calls are UNAVAILABLE — or CANCELLED
    for a call gRPC core still held unmatched when shutdown began (grpc/grpc#41785): its
    handler never ran, so it must have stored nothing."""
    proc: ServerProcess = server_factory()
    stop = threading.Event()
    acked: dict[str, str] = {}
    failed: dict[str, str] = {}

    def produce(index: int) -> None:
        channel = grpc.insecure_channel(proc.grpc_target, options=CHANNEL_OPTIONS)
        stub = producer_pb2_grpc.ProducerServiceStub(channel)
        n = 0
        while not stop.is_set():
            n += 1
            key = f"{index}-{n}"
            try:
                acked[key] = stub.Enqueue(job("term", f"p{index}", key=key), timeout=5).job_id
            except grpc.RpcError as err:
                failed[key] = err.code().name  # type: ignore[attr-defined]
                time.sleep(0.01)
        channel.close()

    threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while len(acked) < 200:
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.01)
        started = time.monotonic()
        assert proc.terminate(timeout=20) == 0
        assert time.monotonic() - started < 10
        while not failed and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert set(failed.values()) <= {"UNAVAILABLE", "CANCELLED"}, Counter(failed.values())
    proc.start()
    with connect(proc.grpc_target) as s:
        delivered = s.reserve_all(["term"])
    by_key = {j.idempotency_key: j.id for j in delivered}
    assert len(by_key) == len(delivered) == len({j.id for j in delivered}), "a job stored twice"
    missing = [k for k, job_id in acked.items() if by_key.get(k) != job_id]
    assert not missing, f"{len(missing)} acked jobs lost on SIGTERM"
    cancelled_but_stored = [k for k, code in failed.items() if code == "CANCELLED" and k in by_key]
    assert not cancelled_but_stored, "a call answered CANCELLED had stored its job"


def test_an_unresolvable_http_listen_host_is_one_clean_start_error(tmp_path: Path) -> None:
    """The clean error line was followed by a grpc ``Server.__del__``
    traceback (the gRPC server was left to the garbage collector after the loop closed)."""
    done = subprocess.run([sys.executable, "-m", "sepp", "serve", "--data-dir", str(tmp_path / "data"),
                           "--grpc-listen", "127.0.0.1:0", "--http-listen", "nosuchhost.invalid:0"],
                          capture_output=True, text=True, timeout=30,  # a token: not refused as exposed
                          env=_env(SEPP_AUTH=json.dumps(auth_config()["auth"])))
    assert done.returncode != 0
    err = done.stderr.strip()
    assert err.startswith("sepp: cannot start: cannot listen on nosuchhost.invalid:0 (http_listen)"), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
