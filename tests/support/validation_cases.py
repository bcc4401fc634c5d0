"""The shared local-validation cases (tests/data/validation_cases.json) as requests.

One table serves the validator's unit tests (``wire_request``: a protobuf request, the
schedule relative to a fixed "now"), the Python client against a live server
(``client_request``) and the Rust client (clients/rust/tests/validation_table.rs reads the
same file). The file's ``about`` says how a request is written.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from sepp import EnqueueRequest, Payload
from sepp.api.v1 import common_pb2 as pb
from sepp.hard_limits import MIN_TIMESTAMP_SECONDS
from sepp.wire import custom_to_proto

TABLE_PATH = Path(__file__).resolve().parents[1] / "data" / "validation_cases.json"
TABLE: dict[str, Any] = json.loads(TABLE_PATH.read_text("utf-8"))
#: Every case, in file order.
CASES: list[dict[str, Any]] = TABLE["cases"]
#: The config (ServerConfig keys) of the server the live cases run against.
SERVER: dict[str, Any] = TABLE["server"]

Expected = tuple[str, str, int | None, int | None] | None


def text(value: Any) -> str:
    """A string of the table: plain, or ``{"repeat": s, "times": n}``."""
    return value["repeat"] * value["times"] if isinstance(value, dict) else str(value)


def custom_value(value: Any) -> Any:
    """A custom value of the table as a Python primitive (``{"float": "nan"}`` → nan);
    ``None`` for ``{"unset": true}``."""
    if isinstance(value, dict):
        if value.get("unset"):
            return None
        return float(value["float"])
    return value


def expected(case: dict[str, Any]) -> Expected:
    """(reason, field, limit, actual) the case must get, or ``None`` (accepted)."""
    e = case["expect"]
    return None if e is None else (e[0], e[1], e[2], e[3])


def live(case: dict[str, Any], client: str) -> bool:
    """Whether ``client`` (``"client"`` = every client, ``"rust"``) runs the case against a server."""
    not_in = case.get("not_in", {})
    return case.get("live", True) and "client" not in not_in and client not in not_in


def wire_request(case: dict[str, Any], now_ns: int) -> pb.EnqueueRequest:
    """The case as the wire request the validator judges, its schedule relative to ``now_ns``."""
    r = case["request"]
    msg = pb.EnqueueRequest(queue=text(r["queue"]), job_type=text(r["job_type"]),
                            payload=pb.Payload(data=b"x" * r.get("data_len", 0), encoding=text(r.get("encoding", ""))))
    for field in ("priority", "max_attempts"):
        if field in r:
            setattr(msg, field, r[field])
    for key, value in r.get("custom", []):
        v = custom_value(value)
        msg.custom[text(key)].CopyFrom(pb.CustomValue() if v is None else custom_to_proto(v))
    for key, value in r.get("trace", []):
        msg.trace_context[text(key)] = text(value)
    if "idempotency_key" in r:
        msg.idempotency_key = text(r["idempotency_key"])
    if "scheduled_in_ns" in r:
        msg.scheduled_at.seconds, msg.scheduled_at.nanos = divmod(now_ns + r["scheduled_in_ns"], 10**9)
    if "scheduled_at" in r:
        msg.scheduled_at.seconds, msg.scheduled_at.nanos = r["scheduled_at"]["seconds"], r["scheduled_at"]["nanos"]
    return msg


def _aware(seconds: int) -> dt.datetime:
    """An aware datetime at ``seconds`` since the epoch (UTC), below year 1 too (as a time
    zone's wall clock at 0001-01-01)."""
    if seconds >= MIN_TIMESTAMP_SECONDS:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    return dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(seconds=MIN_TIMESTAMP_SECONDS - seconds)))


def client_request(case: dict[str, Any]) -> EnqueueRequest:
    """The case as the Python client's ``EnqueueRequest`` (schedules relative to now)."""
    r = case["request"]
    custom = {text(k): custom_value(v) for k, v in r.get("custom", [])}
    scheduled = None
    if "scheduled_in_ns" in r:
        scheduled = dt.datetime.now(dt.UTC) + dt.timedelta(microseconds=r["scheduled_in_ns"] / 1000)
    if "scheduled_at" in r:
        scheduled = _aware(r["scheduled_at"]["seconds"])
    payload = None
    if "data_len" in r or "encoding" in r:
        payload = Payload(b"x" * r.get("data_len", 0), text(r.get("encoding", "")))
    return EnqueueRequest(text(r["queue"]), text(r["job_type"]), payload=payload, custom=custom,
                          priority=r.get("priority"), max_attempts=r.get("max_attempts"), scheduled_at=scheduled,
                          idempotency_key=text(r["idempotency_key"]) if "idempotency_key" in r else None,
                          trace_context={text(k): text(v) for k, v in r.get("trace", [])})
