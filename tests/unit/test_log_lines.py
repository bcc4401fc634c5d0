"""The pieces of sepp's log lines: JSON records, secret masking, the start
line's config summary and the rate limit of flood-prone events. The whole server is checked
in tests/integration/test_logs.py."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sepp import logs
from sepp.server.config import ServerConfig
from sepp.server.eventlog import RateLimited, config_secrets, config_summary, dsn_password, mask_dsn


@pytest.fixture
def restore_root() -> Iterator[None]:
    """Put the root logger's handlers and level back after a test that calls ``configure``."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


def record(msg: str, *args: Any, level: int = logging.INFO, exc: bool = False, **extra: Any) -> logging.LogRecord:
    rec = logging.LogRecord("sepp.engine", level, __file__, 1, msg, args, None)
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            rec.exc_info = sys.exc_info()
    rec.__dict__.update(extra)
    rec.created = 1767268800.1234  # 2026-01-01T12:00:00.123Z
    return rec


def test_a_json_line_has_the_fixed_fields_then_the_events_own() -> None:
    line = logs.JsonFormatter("node-a").format(record("job %s dead-lettered", "j1", level=logging.WARNING,
                                                      queue="emails", job_id="j1", count=2, queues=("a", "b")))
    assert json.loads(line) == {"ts": "2026-01-01T12:00:00.123Z", "level": "warning", "logger": "sepp.engine",
                                "node": "node-a", "msg": "job j1 dead-lettered", "queue": "emails", "job_id": "j1",
                                "count": 2, "queues": ["a", "b"]}
    assert "\n" not in line


def test_a_json_line_carries_the_exception_as_one_string_field() -> None:
    entry = json.loads(logs.JsonFormatter("n").format(record("failed", exc=True, odd=object())))
    assert entry["exc"].startswith("Traceback (most recent call last):") and "ValueError: boom" in entry["exc"]
    assert entry["odd"].startswith("<object object at ")  # not JSON-able: its str


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_every_secret_is_masked_in_every_line_whatever_logged_it(log_format: logs.LogFormat,
                                                                 restore_root: None) -> None:
    out = io.StringIO()
    logs.configure("info", log_format, "node-a", secrets=["tok-123", 'pw"x'], stream=out)
    logging.getLogger("someone.else").info("connecting with tok-123 and pw\"x to %s", "db")
    line = out.getvalue().strip()
    assert "tok-123" not in line and 'pw"x' not in line and 'pw\\"x' not in line
    assert line.count("***") == 2
    if log_format == "json":
        assert json.loads(line)["msg"] == "connecting with *** and *** to db"
    else:
        assert line.endswith(" INFO someone.else [node-a]: connecting with *** and *** to db")
    assert logs.child_settings() == {"level": "info", "format": log_format, "node": "node-a"}  # no secrets


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        logs.formatter("xml", "n")  # type: ignore[arg-type]


@pytest.mark.parametrize(("dsn", "masked", "password"), [
    ("postgresql://app:s3cret@db.example:5432/jobs", "postgresql://app:***@db.example:5432/jobs", "s3cret"),
    ("postgresql://app@db/jobs?sslmode=require&password=s3cret", "postgresql://app@db/jobs?sslmode=require&password=***",
     "s3cret"),
    ("postgresql://app:p%40ss@[::1]/jobs", "postgresql://app:***@[::1]/jobs", "p%40ss"),
    ("host=db user=app password=s3cret dbname=jobs", "host=db user=app password=*** dbname=jobs", "s3cret"),
    ("postgresql://app@db/jobs", "postgresql://app@db/jobs", ""),
    ("", "", ""),
])
def test_a_dsn_is_shown_with_its_password_masked(dsn: str, masked: str, password: str) -> None:
    assert mask_dsn(dsn) == masked
    assert dsn_password(dsn) == password


@dataclass
class _Token:
    name: str
    sha256: str
    roles: list[str] = field(default_factory=list)


@dataclass
class _Auth:
    tokens: list[_Token]


def test_the_config_summary_masks_every_secret_and_counts_the_tokens() -> None:
    cfg = ServerConfig(storage="postgres", postgres_dsn="postgresql://app:s3cret@db/jobs", admin_token="adm1n",
                       log_format="json")
    summary = config_summary(cfg, "node-a")
    assert summary["postgres_dsn"] == "postgresql://app:***@db/jobs"
    assert summary["admin_token"] == "***" and summary["auth"] == "off" and summary["log_format"] == "json"
    text = json.dumps(summary)
    assert "s3cret" not in text and "adm1n" not in text
    assert config_secrets(cfg) == ["adm1n", "s3cret"]

    class WithAuth:  # what the auth helper's [[auth.tokens]] will look like to the summary
        def __init__(self, base: ServerConfig) -> None:
            self.__dict__.update({name: getattr(base, name) for name in type(base).model_fields})
            self.writer_placement = base.writer_placement
            self.auth = _Auth([_Token("billing", "ab" * 32, ["produce"]), _Token("ops", "cd" * 32, ["admin"])])

    with_auth: Any = WithAuth(cfg)
    summary = config_summary(with_auth, "node-a")
    assert summary["auth"] == "2 tokens" and "ab" * 32 not in json.dumps(summary)
    assert config_secrets(with_auth) == ["adm1n", "s3cret", "ab" * 32, "cd" * 32]
    encoded = ServerConfig(postgres_dsn="postgresql://app:p%40ss@db/jobs")
    assert config_secrets(encoded) == ["p%40ss", "p@ss"]  # either form may show up in a message


def test_a_flood_is_logged_as_a_burst_then_one_line_with_the_count_left_out() -> None:
    now = [0.0]
    out = io.StringIO()
    logger = logging.getLogger("sepp.test.rate")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter("n"))
    logger.addHandler(handler)
    try:
        limited = RateLimited(logger, burst=2, every=5.0, clock=lambda: now[0])
        logged = [limited.log(logging.WARNING, "event %d", i, extra={"i": i}) for i in range(5)]
        assert logged == [True, True, False, False, False]
        now[0] = 4.999
        assert not limited.log(logging.WARNING, "event %d", 5)
        now[0] = 5.0  # the burst is back
        assert limited.log(logging.WARNING, "event %d", 6, extra={"i": 6})
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["msg"] for e in lines] == ["event 0", "event 1",
                                         "event 6 (and 4 more not logged since the last such line)"]
    assert lines[-1]["suppressed"] == 4 and lines[-1]["i"] == 6
