"""Validation of the flow-control queue settings (docs/flow-control.md): a bad
``rate_limit`` or a negative number is a clear refusal naming the field — INVALID_ARGUMENT
from the admin API (``merge_settings``, what DeclareQueue / UpdateQueue run), a start error
at config load — and a stored row that is not valid falls back to the default."""

from __future__ import annotations

from pathlib import Path

import pytest

from sepp.limits import QueueSettings, clamp_settings, parse_rate
from sepp.server.admin import merge_settings
from sepp.server.config import ConfigError, load_config
from sepp.server.errors import InvalidRequest
from sepp.server.queues import flow_limits


@pytest.mark.parametrize(("text", "expected"), [("50/s", (50, 1.0)), ("1000/m", (1000, 60.0)), ("3/h", (3, 3600.0)),
                                                (" 7 / D ", (7, 86400.0)), ("2147483647/s", (2147483647, 1.0))])
def test_rates_parse(text: str, expected: tuple[int, float]) -> None:
    assert parse_rate(text) == expected


# "１/s", "١٠/s", "²/s": non-ASCII digits (attack notes F3: the first two were taken as 1/s and
# 10/s, the third answered "invalid literal for int()").
@pytest.mark.parametrize("text", ["50", "/s", "0/s", "2147483648/s", "-1/s", "1.5/s", "5/w", "5/sec", "fast",
                                  "\uff11/s", "\u0661\u0660/s", "\u00b2/s"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)


@pytest.mark.parametrize(("field", "value"), [("rate_limit", "fast"), ("rate_limit", "0/s"), ("max_in_flight", -1),
                                              ("rate_burst", -1), ("max_in_flight_per_key", -1),
                                              ("max_in_flight_per_key", 1), ("concurrency_key", "a\x00b")])
def test_the_admin_api_refuses_a_bad_value_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidRequest) as err:
        merge_settings(QueueSettings(), {field: value}, [field], 16 * 1024 * 1024)
    assert err.value.field == field


def test_a_per_key_limit_without_a_key_is_refused_in_plain_words() -> None:
    # The newuser trial: `sepp queues declare q --max-in-flight-per-key 2` printed
    # "max_in_flight_per_key: Value error, max_in_flight_per_key needs concurrency_key …".
    with pytest.raises(InvalidRequest) as err:
        merge_settings(QueueSettings(), {"max_in_flight_per_key": 2}, ["max_in_flight_per_key"], 16 * 1024 * 1024)
    assert str(err.value).startswith("max_in_flight_per_key: max_in_flight_per_key needs concurrency_key (")
    assert "Value error" not in str(err.value)


@pytest.mark.parametrize(("line", "field"), [('rate_limit = "50 per second"', "queues.q.rate_limit"),
                                             ("max_in_flight = -3", "queues.q.max_in_flight"),
                                             ("rate_burst = -1", "queues.q.rate_burst"),
                                             ("max_in_flight_per_key = 2", "queues.q.max_in_flight_per_key")])
def test_config_load_refuses_a_bad_value_naming_the_key(tmp_path: Path, line: str, field: str) -> None:
    path = tmp_path / "sepp.toml"
    path.write_text(f"[queues.q]\n{line}\n")
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(path)


def test_a_rate_is_kept_normalised_and_travels_as_a_token_bucket() -> None:
    s = QueueSettings(rate_limit=" 1000 / M ", max_in_flight=4)
    assert s.rate_limit == "1000/m"
    flow = flow_limits(s)
    assert (flow.max_in_flight, flow.rate_amount, flow.rate_period, flow.rate_burst) == (4, 1000, 60_000_000, 1000)
    assert flow_limits(QueueSettings(rate_limit="5/s", rate_burst=50)).rate_burst == 50
    assert not flow_limits(QueueSettings(rate_burst=50)).active   # a burst without a rate limits nothing


def test_a_stored_bad_rate_falls_back_to_unlimited() -> None:
    settings, notes = clamp_settings({"rate_limit": "lots", "max_in_flight": -5})
    assert settings.rate_limit == "" and settings.max_in_flight == 0
    assert len(notes) == 2


def test_a_per_key_limit_needs_its_key_and_travels_with_it() -> None:
    flow = flow_limits(QueueSettings(concurrency_key="tenant_id", max_in_flight_per_key=2))
    assert flow.active and flow.per_key and (flow.key, flow.max_per_key) == ("tenant_id", 2)
    assert not flow_limits(QueueSettings(concurrency_key="tenant_id")).active  # the key alone limits nothing
