"""CLI flag values: one duration grammar, bounds taken from the server's model, one-line errors
that name the flag, the limit and the value; ``sepp serve --help``.

In-process (typer's CliRunner); every command here fails on its input before it would
contact a server, so ``--server`` points at a closed port.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sepp.cli.flags import FlagValueError, human_seconds, parse_seconds, setting_bounds
from sepp.cli.main import _register, app
from sepp.cli.queue_flags import SETTING_FLAGS, settings_from_flags
from sepp.limits import MAX_BACKOFF, MAX_LEASE, MAX_RETENTION, MIN_LEASE, fmt_number

_register()
runner = CliRunner()
NOWHERE = ["--server", "127.0.0.1:1"]
NARROW = {"COLUMNS": "40"}
DURATION_FLAGS = {path: flag for path, flag in SETTING_FLAGS.items()
                  if path in ("lease_duration", "dedup_window", "retry_base", "retry_cap", "completed_retention",
                              "dead_letter_retention")}


def one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("text", "seconds"), [
    ("45", 45), ("1.5", 1.5), ("1e3", 1000), ("1e3s", 1000), ("1.5e1m", 900), ("2E2ms", 0.2), (".5h", 1800),
    ("250ms", 0.25), ("1h30m", 5400), ("1d12h", 129600), ("0", 0), ("1e-3s", 0.001),
])
def test_one_duration_grammar_with_units_after_exponents_too(text: str, seconds: float) -> None:
    assert parse_seconds("--x", text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1e", "e3", "1e3x", "1 h", "+5", "inf", "nan", "1_000", "5s5",
                                  "1h-30m"])
def test_anything_else_is_not_a_duration_and_the_message_lists_the_forms(text: str) -> None:
    with pytest.raises(FlagValueError) as info:
        parse_seconds("--lease", text)
    assert str(info.value).startswith(f"--lease {text}: not a duration; use seconds (45, 1.5, 1e3)")
    assert "1e3s" in str(info.value) and "1h30m" in str(info.value)


def test_a_quoted_value_is_cut_at_200_characters_with_its_length() -> None:
    with pytest.raises(FlagValueError) as info:
        parse_seconds("--lease", "x" * 10_000)
    assert str(info.value).startswith("--lease " + "x" * 200 + "… (10000 chars): not a duration")


def test_the_cli_uses_the_servers_bounds_for_every_queue_setting() -> None:
    """Taken from sepp.limits.QueueSettings, not copied: the same numbers the docs table lists."""
    assert {path: setting_bounds(path)[1] for path in DURATION_FLAGS} == {
        "lease_duration": MAX_LEASE, "dedup_window": MAX_RETENTION, "retry_base": MAX_BACKOFF,
        "retry_cap": MAX_BACKOFF, "completed_retention": MAX_RETENTION, "dead_letter_retention": MAX_RETENTION}
    assert setting_bounds("lease_duration")[0] == MIN_LEASE
    assert (human_seconds(MAX_RETENTION), human_seconds(MAX_LEASE), human_seconds(0.001)) == \
        ("10 years", "1 day", "0.001 s")


@pytest.mark.parametrize("path", list(DURATION_FLAGS))
def test_each_duration_setting_at_its_limit_is_sent_and_one_past_is_refused(path: str) -> None:
    lo, hi = setting_bounds(path)
    assert lo is not None and hi is not None
    settings, paths = settings_from_flags(**{path: fmt_number(hi)})
    assert paths == [path] and settings is not None
    assert getattr(settings, path).seconds == int(hi)
    settings_from_flags(**{path: fmt_number(lo)})
    flag = DURATION_FLAGS[path]
    past = f"{int(hi) + 1}s"
    result = runner.invoke(app, ["queues", "declare", "q", flag, past, *NOWHERE], env=NARROW)
    assert result.exit_code == 2
    words = f" ({human_seconds(hi)})" if not human_seconds(hi).endswith(" s") else ""
    assert one_error_line(result.stderr) == f"error: {flag} {past}: must be at most {fmt_number(hi)} s{words}"


@pytest.mark.parametrize("value", ["999999999d", "1e13", "1e13s", "315576000001", "3651d", "1e400"])
def test_dedup_window_past_ten_years_names_the_flag_the_value_and_the_real_limit(value: str) -> None:
    """The reported case: it quoted the protobuf Duration range (315576000000 s) and no flag."""
    result = runner.invoke(app, ["queues", "declare", "archive", "--dedup-window", value, *NOWHERE], env=NARROW)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == \
        f"error: --dedup-window {value}: must be at most 315360000 s (10 years)"


def test_json_errors_carry_flag_limit_and_value() -> None:
    result = runner.invoke(app, ["queues", "declare", "q", "--lease", "0", "--json", *NOWHERE])
    assert result.exit_code == 2
    assert json.loads(result.stderr) == {"error": "--lease 0: must be at least 0.001 s", "flag": "--lease",
                                         "limit": 0.001, "value": "0"}


@pytest.mark.parametrize(("args", "message"), [
    (["--priority", "10"], "--priority 10: must be at most 9"),
    (["--priority", "-1"], "--priority -1: must be at least 0"),
    (["--max-attempts", "1000001"], "--max-attempts 1000001: must be at most 1000000"),
    (["--retry-jitter", "1.5"], "--retry-jitter 1.5: must be at most 1"),
    (["--retry-jitter", "nan"], "--retry-jitter nan: must be a finite number"),
    (["--max-payload-bytes", "2147483648"], "--max-payload-bytes 2147483648: must be at most 2147483647"),
    (["--max-custom-key-bytes", "0"], "--max-custom-key-bytes 0: must be at least 1"),
    (["--lease", "-5s"], "--lease -5s: a duration must not be negative"),
    ([arg for i in range(65) for arg in ("--allowed-encoding", f"e{i}")],
     "--allowed-encoding (given 65 times): at most 64 labels are allowed"),
])
def test_number_and_list_flags_are_bounded_like_the_server(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["queues", "declare", "q", *args, *NOWHERE], env=NARROW)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == f"error: {message}"


@pytest.mark.parametrize(("args", "message"), [
    (["enqueue", "q", "t", "--in", "3651d"], "--in 3651d: must be at most 315360000 s (10 years)"),
    (["enqueue", "q", "t", "--in", "1e13s"], "--in 1e13s: must be at most 315360000 s (10 years)"),
    (["enqueue", "q", "t", "--in", "soon"], "--in soon: not a duration; use "),
    (["jobs", "requeue", "--all-dead", "--after", "1e13s"],
     "--after 1e13s: that long ago is before 0001-01-01T00:00:00Z"),
    (["jobs", "requeue", "--all-dead", "--before", "yesterday"], "--before yesterday: not an RFC 3339 time"),
])
def test_other_duration_flags_name_themselves_the_same_way(args: list[str], message: str) -> None:
    result = runner.invoke(app, [*args, *NOWHERE], env=NARROW)
    assert result.exit_code == 2
    assert one_error_line(result.stderr).startswith(f"error: {message}")


def test_a_long_input_error_stays_on_one_line_on_a_narrow_terminal(tmp_path: Path) -> None:
    missing = tmp_path / ("d" * 150) / "payload.bin"
    result = runner.invoke(app, ["enqueue", "q", "t", "--payload-file", str(missing), *NOWHERE], env=NARROW)
    assert result.exit_code == 2
    assert str(missing) in one_error_line(result.stderr)


@pytest.mark.parametrize(("args", "message"), [
    (["--lease", "0"], "sepp worker: --lease 0: must be at least 0.001 s"),
    (["--lease", "86401"], "sepp worker: --lease 86401: must be at most 86400 s (1 day)"),
    (["--lease", "inf"], "sepp worker: --lease inf: must be a finite number of seconds"),
    (["--shutdown-grace", "-1"], "sepp worker: --shutdown-grace -1: must be at least 0 s"),
])
def test_worker_seconds_flags_are_one_line_errors(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["worker", "nowhere:worker", *args], env=NARROW)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == message


def test_serve_help_shows_its_defaults_without_stray_dots() -> None:
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = re.sub(r"\s+", " ", result.stdout)
    assert " ." not in text and " ;" not in text
    for option, default in (("Data folder (sqlite storage).", "sepp-data"),
                            ("Storage backend: sqlite | postgres.", "sqlite"), ("gRPC HOST:PORT.", "127.0.0.1:7700"),
                            ("HTTP HOST:PORT; '' = off.", "127.0.0.1:7701"), ("sync | group | async.", "group"),
                            ("debug | info | warning | error.", "info")):
        assert f"{option} [default: ({default})]" in text, text


def test_a_line_break_in_a_value_does_not_break_the_error_line() -> None:
    result = runner.invoke(app, ["queues", "declare", "q", "--lease", "1h\n30m", *NOWHERE], env=NARROW)
    assert result.exit_code == 2
    assert one_error_line(result.stderr).startswith("error: --lease 1h\\n30m: not a duration")
