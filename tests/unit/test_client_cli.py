"""``sepp enqueue`` parsing: typed custom entries, durations, times, batch lines, input errors.

Nothing here talks to a server; the commands under test fail on their input first
(exit 2) or cannot connect (exit 3).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sepp.cli.job_input as job_input
import sepp.cli.producer as producer
from sepp.cli.main import app
from sepp.request import JSON_ENCODING, Payload

runner = CliRunner()


@pytest.mark.parametrize(("spec", "expected"), [
    ("n:int=42", ("n", 42)),
    ("n:int=-7", ("n", -7)),
    ("f:float=1.5", ("f", 1.5)),
    ("b:bool=true", ("b", True)),
    ("b:bool=No", ("b", False)),
    ("b:bool=1", ("b", True)),
    ("s:str=007", ("s", "007")),
    ("s:str=", ("s", "")),
    ("n=42", ("n", 42)),
    ("n=-3", ("n", -3)),
    ("f=1.5", ("f", 1.5)),
    ("f=1e3", ("f", 1000.0)),
    ("b=true", ("b", True)),
    ("b=false", ("b", False)),
    ("s=True", ("s", "True")),
    ("s=007", ("s", "007")),
    ("s=+1", ("s", "+1")),
    ("s=nan", ("s", "nan")),
    ("s=hello world", ("s", "hello world")),
    ("s=a=b", ("s", "a=b")),
    ("ns:key=1", ("ns:key", 1)),
    ("ns:key:str=1", ("ns:key", "1")),
    ("big=9223372036854775807", ("big", 2**63 - 1)),
])
def test_custom_entries_are_typed_explicitly_or_inferred_like_json(spec: str,
                                                                   expected: tuple[str, object]) -> None:
    key, value = job_input.parse_custom(spec)
    assert (key, value) == expected
    assert type(value) is type(expected[1])


def test_typed_float_accepts_nan_and_leaves_the_verdict_to_validation() -> None:
    assert math.isnan(float(job_input.parse_custom("x:float=nan")[1]))


@pytest.mark.parametrize("spec", ["novalue", "n:int=x", "n:int=1.5", "f:float=abc", "b:bool=maybe",
                                  "n=9223372036854775808", "n:int=-9223372036854775809"])
def test_bad_custom_entries_raise_value_error(spec: str) -> None:
    with pytest.raises(ValueError):
        job_input.parse_custom(spec)


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("250ms", 0.25), ("1h30m", 5400),
    ("1.5h", 5400), ("45", 45), ("0", 0),
])
def test_durations(text: str, seconds: float) -> None:
    assert producer.parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "10x", "-5", "m", "1h 30m", "inf", "nan", "10m-"])
def test_bad_durations_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        producer.parse_duration(text)


def test_times_need_a_zone() -> None:
    assert producer.parse_when("2030-01-01T09:00:00Z") == dt.datetime(2030, 1, 1, 9, tzinfo=dt.UTC)
    assert producer.parse_when("2030-01-01T10:00:00+01:00").utcoffset() == dt.timedelta(hours=1)
    with pytest.raises(ValueError, match="time zone"):
        producer.parse_when("2030-01-01T09:00:00")
    with pytest.raises(ValueError, match="ISO 8601"):
        producer.parse_when("tomorrow")


def test_batch_payloads_are_json_values_or_base64_bytes() -> None:
    assert job_input.payload_from_json_value(None) is None
    assert job_input.payload_from_json_value({"user_id": 42}) == Payload(b'{"user_id":42}', JSON_ENCODING)
    assert job_input.payload_from_json_value("text") == Payload(b'"text"', JSON_ENCODING)
    raw = {"data_b64": base64.b64encode(b"\x00\xff").decode(), "encoding": "application/octet-stream"}
    assert job_input.payload_from_json_value(raw) == Payload(b"\x00\xff", "application/octet-stream")
    assert job_input.payload_from_json_value({"data_b64": ""}) == Payload(b"", "")
    # An object with other keys besides data_b64 is an ordinary JSON payload.
    assert job_input.payload_from_json_value({"data_b64": "x", "more": 1}).encoding == JSON_ENCODING  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="base64"):
        job_input.payload_from_json_value({"data_b64": "not base64!"})


def test_batch_lines_inherit_command_line_defaults() -> None:
    defaults = job_input.JobDefaults(queue="emails", job_type="welcome", custom={"a": 1, "b": 2}, priority=3)
    text = "\n".join([
        json.dumps({}),
        "",
        json.dumps({"queue": "other", "job_type": "x", "priority": 9, "custom": {"b": "two", "c": 1.5},
                    "scheduled_at": "2030-01-01T00:00:00Z", "idempotency_key": "k",
                    "trace_context": {"tracestate": "a=b"}}),
    ])
    (n1, first), (n3, third) = job_input.read_batch_lines(text, defaults)
    assert (n1, first.queue, first.job_type, first.priority) == (1, "emails", "welcome", 3)
    assert dict(first.custom) == {"a": 1, "b": 2}
    assert (n3, third.queue, third.priority) == (3, "other", 9)
    assert dict(third.custom) == {"a": 1, "b": "two", "c": 1.5}
    assert third.scheduled_at == dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert third.idempotency_key == "k" and dict(third.trace_context) == {"tracestate": "a=b"}


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "line 2"),
    ("[1, 2]", "JSON object"),
    ('{"job_type": "t", "quue": "x"}', "unknown keys"),
    ('{"queue": "q"}', "required"),
    ('{"queue": "q", "job_type": "t", "scheduled_at": "2030-01-01T00:00:00"}', "time zone"),
    ('{"queue": "q", "job_type": "t", "custom": {"n": 99999999999999999999}}', "int64"),
    ('{"queue": "q", "job_type": "t", "custom": {"n": [1]}}', "custom"),
])
def test_bad_batch_lines_are_reported_with_their_line_number(line: str, message: str) -> None:
    text = '{"queue": "q", "job_type": "t"}\n' + line
    with pytest.raises(ValueError, match=message) as info:
        job_input.read_batch_lines(text, job_input.JobDefaults())
    assert str(info.value).startswith("line 2:")


def test_chunks_split_in_order() -> None:
    assert [list(c) for c in job_input.chunks(list(range(5)), 2)] == [[0, 1], [2, 3], [4]]


# ----------------------------------------------------------------- command input errors (exit 2)


@pytest.mark.parametrize("args", [
    ["enqueue", "q", "t", "--at", "2030-01-01T00:00:00"],
    ["enqueue", "q", "t", "--at", "2030-01-01T00:00:00Z", "--in", "5m"],
    ["enqueue", "q", "t", "--in", "soon"],
    ["enqueue", "q", "t", "-c", "novalue"],
    ["enqueue", "q", "t", "-c", "n=99999999999999999999"],
    ["enqueue", "q", "t", "not json", "--json-payload"],
    ["enqueue", "q", "t", "--atomic"],
    ["enqueue", "q"],
    ["enqueue", "q", "t", "payload", "--payload-file", "x.bin"],
])
def test_bad_input_exits_2_before_contacting_a_server(args: list[str]) -> None:
    result = runner.invoke(app, [*args, "--server", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert "error" in result.stderr


def test_bad_input_with_json_prints_a_json_error() -> None:
    result = runner.invoke(app, ["enqueue", "q", "t", "--in", "soon", "--json", "--server", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert json.loads(result.stderr)["error"] == "invalid_input"


def test_batch_file_with_a_bad_line_exits_2_and_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"queue": "q", "job_type": "t"}\n{"queue": 1\n')
    result = runner.invoke(app, ["enqueue", "--batch-file", str(path), "--server", "127.0.0.1:1"])
    assert result.exit_code == 2 and "line 2" in result.stderr
    # The file's line and the column in it — not json's "line 1" of the one line it parsed —
    # and that line 1, good as it is, was not sent either.
    message = " ".join(result.stderr.split())
    assert "line 2: not valid JSON (Expecting" in message and "column 12" in message, message
    assert "line 1" not in message and "nothing was sent" in message, message


def test_an_unreachable_server_exits_3() -> None:
    result = runner.invoke(app, ["enqueue", "q", "t", "--server", "127.0.0.1:1", "--timeout", "0.5", "--json"])
    assert result.exit_code == 3, result.output
    error = json.loads(result.stderr)
    assert (error["error"], error["kind"]) == ("transport", "Unavailable")
