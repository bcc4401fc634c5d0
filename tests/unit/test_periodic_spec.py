"""Periodic schedules' definitions and timetables: the ``[[periodic]]`` table's
errors at config load (bad cron, unknown time zone, unknown field — each naming
``periodic[i].FIELD``), ``every`` parsing, the idempotency key's form, and the tick times
across Europe/Berlin's DST changes (what a 02:30 schedule does when 02:30 does not exist,
or happens twice)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from sepp.server.app import SeppServer
from sepp.server.config import ConfigError, ServerConfig, load_config
from sepp.server.periodic.spec import EVERY_MAX_SECONDS, PeriodicSettings, parse_every
from sepp.server.periodic.timetable import Timetable, rfc3339, tick_key
from sepp.storage.config import SQLiteSettings

S = 1_000_000


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()) * S


def berlin(cron: str) -> Timetable:
    return Timetable(PeriodicSettings(name="n", cron=cron, timezone="Europe/Berlin", queue="q", job_type="t"))


TABLE = '[[periodic]]\nname = "nightly-report"\nqueue = "reports"\njob_type = "build_report"\n'


@pytest.mark.parametrize(("extra", "message"), [
    ('cron = "0 25 * * *"', "periodic[0].cron: bad cron expression '0 25 * * *': Bad hour"),
    ('cron = "0 3 * *"', "periodic[0].cron: bad cron expression '0 3 * *': Wrong number of fields"),
    ('cron = "0 3 * * *"\ntimezone = "Europe/Atlantis"', "periodic[0].timezone: unknown time zone 'Europe/Atlantis'"),
    ('cron = "0 3 * * *"\ncolour = "red"', "periodic[0].colour: unknown field; a [[periodic]] table takes name, cron"),
    ('every = "15 minutes"', "periodic[0].every: every '15 minutes' is not a duration"),
    ("", "periodic[0]: set exactly one of cron"),
    ('cron = "0 3 * * *"\ncatch_up = "all"', "periodic[0].catch_up: Input should be 'latest' or 'none'"),
    ('cron = "0 3 * * *"\npriority = 10', "periodic[0].priority: Input should be less than or equal to 9"),
    ('every = "1m"\ncustom = { k = nan }', "periodic[0].custom: custom['k'] = nan is not a finite"),
    ('cron = "0 3 * * *"\ntimezone = "localtime"', "periodic[0].timezone: time zone 'localtime' is this machine's"),
])
def test_a_bad_periodic_table_is_a_config_error_naming_its_field(tmp_path: Path, extra: str, message: str) -> None:
    path = tmp_path / "sepp.toml"
    path.write_text(TABLE + extra + "\n", "utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)


def test_the_issues_example_loads_and_names_must_be_unique(tmp_path: Path) -> None:
    path = tmp_path / "sepp.toml"
    example = TABLE + ('cron = "0 3 * * *"\ntimezone = "Europe/Berlin"\npayload = \'{"kind": "nightly"}\'\n'
                       'custom = { region = "eu" }\npriority = 7\ncatch_up = "latest"\n')
    path.write_text(example, "utf-8")
    (spec,) = load_config(path).periodic
    assert (spec.cron, spec.timezone, spec.custom, spec.priority, spec.encoding) == (
        "0 3 * * *", "Europe/Berlin", {"region": "eu"}, 7, "application/json")
    path.write_text(example + "\n" + TABLE + 'every = "1h"\n', "utf-8")
    with pytest.raises(ConfigError, match=r"periodic\[1\] repeats the name 'nightly-report' of periodic\[0\]"):
        load_config(path)


@pytest.mark.parametrize(("text", "seconds"), [("15m", 900), ("1h30m", 5400), ("90s", 90), ("1d", 86_400),
                                                ("1s", 1), ("366d", EVERY_MAX_SECONDS), ("45", 45)])
def test_every_takes_units_d_h_m_s(text: str, seconds: int) -> None:
    assert parse_every(text) == seconds


# The last ones (attack notes F3): non-ASCII digits, a repeated unit, units out of order.
@pytest.mark.parametrize("text", ["0s", "367d", "15 m", "1.5h", "m", "", "1w", "\uff11s", "\u0663m", "\u00b2",
                                  "1m1m", "30m1h", "1s1d"])
def test_every_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError):
        parse_every(text)


def test_the_idempotency_key_is_the_name_and_the_tick_in_utc_rfc3339() -> None:
    assert tick_key("nightly-report", utc(2026, 3, 29, 1)) == "periodic:nightly-report:2026-03-29T01:00:00Z"
    assert rfc3339(utc(2026, 1, 1) + 999_999) == "2026-01-01T00:00:00Z"


def test_every_ticks_at_multiples_of_the_interval_since_the_epoch() -> None:
    t = Timetable(PeriodicSettings(name="n", every="15m", timezone="Asia/Kolkata", queue="q", job_type="t"))
    assert t.next_after(utc(2026, 1, 1, 10, 7)) == utc(2026, 1, 1, 10, 15)
    assert t.next_after(utc(2026, 1, 1, 10, 15)) == utc(2026, 1, 1, 10, 30)  # strictly after
    assert t.latest_at_or_before(utc(2026, 1, 1, 10, 15)) == utc(2026, 1, 1, 10, 15)


def test_spring_forward_runs_a_0230_schedule_once_at_the_jump() -> None:
    # 2026-03-29: 02:00 CET → 03:00 CEST; 02:30 does not exist. Debian cron (cronsim) runs
    # the job right after the jump: 03:00 CEST = 01:00 UTC. Then 02:30 CEST = 00:30 UTC.
    t = berlin("30 2 * * *")
    assert t.upcoming(utc(2026, 3, 28, 12), 3) == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30),
                                                   utc(2026, 3, 31, 0, 30)]
    assert t.latest_at_or_before(utc(2026, 3, 29, 1)) == utc(2026, 3, 29, 1)
    assert t.latest_at_or_before(utc(2026, 3, 29, 1) - 1) == utc(2026, 3, 28, 1, 30)


def test_fall_back_runs_a_0230_schedule_once_at_its_first_occurrence() -> None:
    # 2026-10-25: 03:00 CEST → 02:00 CET; 02:30 happens twice. It runs once, at 02:30 CEST.
    t = berlin("30 2 * * *")
    assert t.upcoming(utc(2026, 10, 24, 12), 2) == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    # From inside the repeated hour (02:00 CET = 01:00 UTC, after the run) the next is the next day,
    # never the past 00:30 UTC cronsim's forward step names from there.
    assert t.next_after(utc(2026, 10, 25, 1)) == utc(2026, 10, 26, 1, 30)
    assert t.latest_at_or_before(utc(2026, 10, 25, 1)) == utc(2026, 10, 25, 0, 30)  # its reverse step skips it
    # A wildcard-hour expression fires by the clock, in both copies of the hour.
    assert berlin("*/30 * * * *").upcoming(utc(2026, 10, 24, 23, 45), 4) == [
        utc(2026, 10, 25, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1), utc(2026, 10, 25, 1, 30)]


async def test_a_declared_schedule_whose_job_its_queue_refuses_stops_the_start(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, grpc_listen="127.0.0.1:0", http_listen="", strict=True,
                          sqlite=SQLiteSettings(writer="thread"),
                          periodic=(PeriodicSettings(name="n", every="1m", queue="nowhere", job_type="t"),))
    server = SeppServer(config)
    with pytest.raises(ConfigError, match=r"periodic\[0\] \(n\): .*UNKNOWN_QUEUE"):
        await server.start()
