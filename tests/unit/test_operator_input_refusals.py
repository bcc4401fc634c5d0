"""The operator's edges: config keys, ``SEPP_*`` variables, CLI flags and the
admin client's times, each found giving a traceback (or silently misbehaving) and now a
one-line, catalogued refusal. Limits: docs/configuration.md "Maxima"."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from sepp.cli.flags import FlagValueError
from sepp.cli.producer import parse_duration
from sepp.cli.queue_flags import settings_from_flags
from sepp.cli.shell import parse_moment
from sepp.client.admin import AdminClient
from sepp.limits import MAX_ALLOWED_ENCODINGS, clamp_settings
from sepp.server.config import ConfigError, load_config
from sepp.worker import WorkerConfig


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sepp.toml"
    path.write_text(text, "utf-8")
    return path


@pytest.mark.parametrize(("key", "value", "ok"), [
    ("grpc_listen", "127.0.0.1:65535", True), ("grpc_listen", "127.0.0.1:65536", False),
    ("grpc_listen", "[::1]:0", True), ("grpc_listen", "nonsense", False),
    ("http_listen", "127.0.0.1:0", True), ("http_listen", "127.0.0.1:99999", False),
    ("http_listen", "127.0.0.1", False), ("http_listen", "::::", False), ("http_listen", "", True),
    ("log_level", "WARNING", True), ("log_level", "verbose", False),
])
def test_listen_addresses_and_log_level_are_checked_when_the_config_is_read(
        tmp_path: Path, key: str, value: str, ok: bool) -> None:
    path = _config(tmp_path, f'{key} = "{value}"\n')
    if ok:
        assert getattr(load_config(path), key) == (value.lower() if key == "log_level" else value)
        return
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{key}: must be ") and "\n" not in str(caught.value)


def test_a_table_variable_that_is_not_json_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEPP_LIMITS", "{bad")
    with pytest.raises(ConfigError, match=r'field "limits".*must be a JSON object'):
        load_config()


def test_allowed_encodings_in_config_take_the_limits_and_refuse_one_past(tmp_path: Path) -> None:
    labels = ", ".join(f'"e{i}"' for i in range(MAX_ALLOWED_ENCODINGS))
    cfg = load_config(_config(tmp_path, f'[queues.a.limits]\nallowed_encodings = [{labels}]\n'))
    assert len(cfg.queues["a"].limits.allowed_encodings) == 64
    with pytest.raises(ConfigError, match="at most 64 items"):
        load_config(_config(tmp_path, f'[queues.a.limits]\nallowed_encodings = [{labels}, "one-more"]\n'))
    assert load_config(_config(tmp_path, f'[queues.a.limits]\nallowed_encodings = ["{"e" * 128}"]\n'))
    with pytest.raises(ConfigError, match=r"a\.limits\.allowed_encodings\[0\] is 129 bytes long"):
        load_config(_config(tmp_path, f'[queues.a.limits]\nallowed_encodings = ["{"e" * 129}"]\n'))


def test_stored_encoding_labels_are_clamped_to_64_and_max_encoding_bytes() -> None:
    settings, notes = clamp_settings({"limits": {"allowed_encodings": ["a" * 200] + [f"e{i}" for i in range(100)]}},
                                     128)
    assert settings.limits.allowed_encodings == tuple(f"e{i}" for i in range(64))
    assert len(notes) == 2
    kept, none = clamp_settings({"limits": {"allowed_encodings": ["e" * 128]}}, 128)
    assert kept.limits.allowed_encodings == ("e" * 128,) and none == []


def test_enqueue_in_past_the_longest_schedule_horizon_is_a_usage_error() -> None:
    """No server accepts a delay beyond MAX_HORIZON (10 years), so ``--in`` stops
    there, naming the flag, the value and the limit."""
    assert parse_duration("3650d") == dt.timedelta(days=3650)
    for text in ("3651d", "999999999d", "9999999999999999999999999999d", "1e400"):
        with pytest.raises(ValueError, match=rf"^--in {text}: must be at most 315360000 s \(10 years\)$"):
            parse_duration(text)


def test_admin_times_outside_the_timestamp_range_are_refused_not_tracebacks() -> None:
    assert parse_moment("0001-01-01T00:00:00Z") == dt.datetime(1, 1, 1, tzinfo=dt.UTC)
    for text in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "315576000000s"):
        with pytest.raises(ValueError, match=rf"^--after {re.escape(text)}: .*0001-01-01"):
            parse_moment(text, "--after")
    with AdminClient("127.0.0.1:1") as client, pytest.raises(ValueError, match="outside 0001-01-01"):
        client.requeue_dead_lettered(after=dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=14))))


@pytest.mark.parametrize(("flag", "name", "at", "past"), [
    ("--priority", "default_priority", 0, -1), ("--priority", "default_priority", 9, 10),
    ("--max-attempts", "default_max_attempts", 1_000_000, 1_000_001),
    ("--max-payload-bytes", "max_payload_bytes", 2**31 - 1, 2**63),
    ("--max-custom-key-bytes", "max_custom_key_bytes", 1, 0),
])
def test_queue_declare_number_flags_are_checked_against_the_servers_bounds(flag: str, name: str, at: int,
                                                                           past: int) -> None:
    """The bound is the pydantic model's (what the server validates with); one past it is a
    usage error naming the flag, the value and the limit (it was a traceback, then a proto
    range error)."""
    settings, paths = settings_from_flags(**{name: at})
    assert paths and settings is not None
    with pytest.raises(FlagValueError, match=rf"^{flag} {past}: must be at (least|most) ") as info:
        settings_from_flags(**{name: past})
    assert info.value.limit == at


def test_worker_settle_batch_is_bounded_by_the_servers_settle_cap() -> None:
    assert WorkerConfig(queues=("q",), settle_batch=10_000).settle_batch == 10_000
    with pytest.raises(ValueError, match="at most 10000"):
        WorkerConfig(queues=("q",), settle_batch=10_001)
