"""Queue settings bounds (SPEC §1 "Queue"; docs/configuration.md): a queue's default lease
runs from 1 ms to 1 day, like a Reserve's own lease and an ExtendLease, at the limit and
one past it on each side; every other duration and count has its maximum too,
a stored row out of range is clamped, and the edge helpers refuse malformed protos."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sepp.limits import (
    MAX_RETENTION,
    MAX_SIZE,
    MAX_TIMESTAMP_SECONDS,
    MIN_TIMESTAMP_SECONDS,
    QueueLimits,
    QueueSettings,
    clamp_settings,
)
from sepp.worker.config import WorkerConfig


@pytest.mark.parametrize("seconds, accepted", [(0.001, True), (0.000999, False), (86_400, True), (86_401, False),
                                               (0, False)])
def test_queue_lease_duration_bounds(seconds: float, accepted: bool) -> None:
    if accepted:
        assert QueueSettings(lease_duration=seconds).lease_duration == seconds
    else:
        with pytest.raises(ValidationError):
            QueueSettings(lease_duration=seconds)


@pytest.mark.parametrize("seconds, accepted", [(0.001, True), (0.000999, False), (86_400, True), (86_401, False)])
def test_worker_lease_duration_bounds(seconds: float, accepted: bool) -> None:
    if accepted:
        assert WorkerConfig(target="127.0.0.1:1", queues=("q",), lease_duration=seconds).lease_duration == seconds
    else:
        with pytest.raises(ValueError, match=r"lease_duration must be between 0\.001 and 86400"):
            WorkerConfig(target="127.0.0.1:1", queues=("q",), lease_duration=seconds)


# ---------------------------------------------------------------- every maximum

MAXIMA = [("dedup_window", 315_360_000), ("completed_retention", 315_360_000), ("dead_letter_retention", 315_360_000),
          ("retry_base", 31_536_000), ("retry_cap", 31_536_000), ("lease_duration", 86_400), ("retry_jitter", 1),
          ("default_max_attempts", 1_000_000), ("default_priority", 9)]


@pytest.mark.parametrize(("name", "limit"), MAXIMA, ids=[m[0] for m in MAXIMA])
def test_each_queue_setting_has_a_maximum_taken_at_the_limit_refused_past_it(name: str, limit: int) -> None:
    assert getattr(QueueSettings.model_validate({name: limit}), name) == limit
    past = limit + (0.001 if name == "retry_jitter" else 1)
    with pytest.raises(ValidationError) as info:
        QueueSettings.model_validate({name: past})
    assert info.value.errors()[0]["ctx"]["le"] == limit


def test_non_finite_numbers_are_refused() -> None:
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValidationError):
            QueueSettings(retry_jitter=value)
        with pytest.raises(ValidationError):
            QueueSettings(dedup_window=value)


def test_clamp_settings_keeps_valid_rows_and_clamps_what_is_out_of_range() -> None:
    valid = QueueSettings(default_priority=2, dedup_window=5.0)
    assert clamp_settings(valid.model_dump()) == (valid, [])
    settings, notes = clamp_settings({"default_priority": 2, "dedup_window": 1e13, "retry_base": -3,
                                      "lease_duration": 0, "retry_jitter": float("nan"), "unknown": 1,
                                      "limits": {"max_payload_bytes": 2**80, "allowed_encodings": "json"}})
    assert settings.default_priority == 2
    assert (settings.dedup_window, settings.retry_base, settings.lease_duration) == (MAX_RETENTION, 0.0, 0.001)
    assert settings.retry_jitter == 0.2, "not a finite number → the default"
    assert settings.limits.max_payload_bytes == MAX_SIZE and settings.limits.allowed_encodings == ()
    assert "dedup_window=10000000000000 is outside 0..315360000; using 315360000" in notes
    assert len(notes) == 7, notes
    assert clamp_settings([1, 2])[0] == QueueSettings()


def test_edge_helpers_refuse_malformed_and_out_of_range_protos_exactly() -> None:
    from google.protobuf import duration_pb2, timestamp_pb2

    from sepp.server.errors import InvalidRequest
    from sepp.server.rpc_args import duration_arg, exact_seconds, timestamp_arg

    assert duration_arg(duration_pb2.Duration(seconds=86_400), "d", 0.001, 86_400) == 86_400
    assert exact_seconds(-1, -500_000_000) == "-1.5" and exact_seconds(0, 1) == "0.000000001"
    for seconds, nanos, field, limit, actual in [(86_400, 1, "d", 86_400, "86400.000000001"),
                                                 (0, 999_999, "d", 0.001, "0.000999999"),
                                                 (2**63 - 1, 0, "d", 86_400, str(2**63 - 1)),
                                                 (0, 10**9, "d.nanos", 999_999_999, 10**9),
                                                 (-3, 7, "d.nanos", 0, 7)]:
        with pytest.raises(InvalidRequest) as info:
            duration_arg(duration_pb2.Duration(seconds=seconds, nanos=nanos), "d", 0.001, 86_400)
        assert (info.value.field, info.value.limit, info.value.actual) == (field, limit, actual)
    assert timestamp_arg(timestamp_pb2.Timestamp(seconds=MAX_TIMESTAMP_SECONDS, nanos=999_999_999), "t") \
        == MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999
    for seconds, nanos, field in [(MAX_TIMESTAMP_SECONDS + 1, 0, "t"), (MIN_TIMESTAMP_SECONDS - 1, 0, "t"),
                                  (0, -1, "t.nanos"), (0, 10**9, "t.nanos")]:
        with pytest.raises(InvalidRequest) as info:
            timestamp_arg(timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos), "t")
        assert info.value.field == field


def test_the_maxima_table_in_the_docs_matches_the_code() -> None:
    """docs/configuration.md "Maxima" lists every bounded setting with the bounds the models enforce."""
    from pathlib import Path

    from pydantic import BaseModel

    from sepp.limits import QueueLimits, ServerLimits, field_bounds
    from sepp.server.config import ServerConfig
    from sepp.storage.config import SQLiteSettings

    text = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text("utf-8")
    table = text.split("| setting | min | max | note |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1:4] for line in table.strip().splitlines()[1:]]
    keys = [key.strip() for key, _lo, _hi in rows]
    assert len(set(keys)) == len(keys) >= 45, keys  # each setting once (the loop below: every one there)
    seen: set[tuple[str, str]] = set()
    for key, lo, hi in rows:
        path = key.strip().strip("`").split(".")
        models: dict[tuple[str, ...], type[BaseModel]] = {("queue", "limits"): QueueLimits, ("queue",): QueueSettings,
                                                          ("limits",): ServerLimits, ("sqlite",): SQLiteSettings}
        model = models.get(tuple(path[:-1]), ServerConfig)
        bounds = field_bounds(model, path[-1])
        assert (float(lo.strip().lstrip("> ")), float(hi)) == bounds, key
        seen.add((model.__name__, path[-1]))
    for every in (QueueSettings, QueueLimits, ServerLimits, ServerConfig, SQLiteSettings):
        for name, info in every.model_fields.items():
            if info.annotation in (int, float):
                assert (every.__name__, name) in seen, f"{every.__name__}.{name} is missing from the Maxima table"


def test_an_unnamed_result_limit_fits_a_small_message_cap_and_a_named_one_is_checked(tmp_path: Path) -> None:
    """max_result_bytes is bounded by max_message_bytes like max_payload_bytes; its 1 MiB
    default, never named, is lowered to a smaller message cap instead (a config or queue
    written before results existed keeps working), and stays unnamed (not overlaid)."""
    from sepp.server.admin.settings import merge_settings
    from sepp.server.config import ServerConfig
    from sepp.server.errors import InvalidRequest

    small = {"limits": {"max_message_bytes": 65536}, "data_dir": tmp_path}
    fits = QueueSettings.model_validate({"limits": {"max_payload_bytes": 1024}})
    named = QueueSettings.model_validate({"limits": {"max_payload_bytes": 1024, "max_result_bytes": 65536}})
    cfg = ServerConfig(**small, queue_defaults=fits, queues={"a": fits, "b": named})  # type: ignore[arg-type]
    assert cfg.queue_defaults.limits.max_result_bytes == cfg.queues["a"].limits.max_result_bytes == 65536
    assert cfg.queues["a"].limits.model_fields_set == {"max_payload_bytes"}  # what the config named, still
    assert cfg.queues["b"].limits.max_result_bytes == 65536  # named, at the cap
    with pytest.raises(ValidationError, match=r"max_result_bytes \(65537\) exceeds max_message_bytes \(65536\)"):
        ServerConfig(**small, queue_defaults={"limits": {"max_payload_bytes": 1024,  # type: ignore[arg-type]
                                                          "max_result_bytes": 65537}})
    old = QueueSettings(limits=QueueLimits(max_payload_bytes=1024))  # a row stored before results
    assert merge_settings(old, {"default_priority": 7}, ["default_priority"], 65536).limits.max_result_bytes == 65536
    with pytest.raises(InvalidRequest) as info:
        merge_settings(old, {"limits": {"max_result_bytes": 65537}}, ["limits.max_result_bytes"], 65536)
    assert (info.value.field, info.value.limit, info.value.actual) == ("limits.max_result_bytes", 65536, 65537)
