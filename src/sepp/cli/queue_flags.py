"""``sepp queues declare`` / ``update`` flags → a ``QueueSettings`` message and its update
mask: each value parsed and checked against the setting's bounds (a refused value raises
``FlagValueError`` naming the flag, the limit and the value)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer

from sepp.api.v1 import common_pb2 as pb
from sepp.cli.admin_calls import fail_flag
from sepp.cli.flags import FlagValueError, check_bounds, max_items, parse_seconds, setting_bounds
from sepp.cli.shell import parse_moment as parse_moment
from sepp.limits import parse_rate

DURATION_SETTINGS = ("lease_duration", "dedup_window", "retry_base", "retry_cap", "completed_retention",
                      "dead_letter_retention", "consumer_timeout")


#: ``sepp queues declare`` flag of each setting path (for error messages).
SETTING_FLAGS = {
    "default_priority": "--priority", "default_max_attempts": "--max-attempts", "lease_duration": "--lease",
    "dedup_window": "--dedup-window", "retry_base": "--retry-base", "retry_cap": "--retry-cap",
    "retry_jitter": "--retry-jitter", "completed_retention": "--completed-retention",
    "dead_letter_retention": "--dead-letter-retention", "limits.max_payload_bytes": "--max-payload-bytes",
    "limits.allowed_encodings": "--allowed-encoding", "limits.max_custom_entries": "--max-custom-entries",
    "limits.max_custom_key_bytes": "--max-custom-key-bytes", "limits.max_custom_bytes": "--max-custom-bytes",
    "limits.max_result_bytes": "--max-result-bytes",
    "max_in_flight": "--max-in-flight", "rate_limit": "--rate-limit", "rate_burst": "--rate-burst",
    "concurrency_key": "--concurrency-key", "max_in_flight_per_key": "--max-in-flight-per-key",
    "consumer_timeout": "--consumer-timeout",
}


def settings_from_flags(**flags: Any) -> tuple[pb.QueueSettings | None, list[str]]:
    """The settings and the mask paths of the flags that were given (keys: setting names,
    ``limits.`` dropped; durations as typed, numbers as parsed).

    Every value is checked against the bounds the server validates with — the ``ge``/``le``
    of ``sepp.limits.QueueSettings`` / ``QueueLimits`` — so a refusal names the
    flag, the limit and the value before any call. Raises ``FlagValueError``
    (``--dedup-window 3651d: must be at most 315360000 s (10 years)``, ``--priority 10: must be
    at most 9``, ``--lease soon: not a duration; use …``).
    """
    settings = pb.QueueSettings()
    paths: list[str] = []
    for name, value in flags.items():
        if value is None or value == []:
            continue
        path = name if name in SETTING_FLAGS else f"limits.{name}"
        flag = SETTING_FLAGS[path]
        if path == "limits.allowed_encodings":
            labels = [] if value == ["*"] else list(value)
            most = max_items(path)
            if most is not None and len(labels) > most:
                raise FlagValueError(flag, f"(given {len(labels)} times)", f"at most {most} labels are allowed", most)
            settings.limits.allowed_encodings.extend(labels)
        elif path == "rate_limit":
            if value.strip():
                try:
                    parse_rate(value)
                except ValueError as exc:
                    raise FlagValueError(flag, value, str(exc)) from None
            settings.rate_limit = value
        elif path == "concurrency_key":
            settings.concurrency_key = value
        elif name in DURATION_SETTINGS:
            lo, hi = setting_bounds(path)
            seconds = parse_seconds(flag, value, lo, hi)
            d = getattr(settings, name)
            d.seconds = int(seconds)
            d.nanos = round((seconds - int(seconds)) * 1e9)
        else:
            lo, hi = setting_bounds(path)
            if isinstance(value, float) and not math.isfinite(value):
                raise FlagValueError(flag, str(value), "must be a finite number")
            check_bounds(flag, str(value), value, lo, hi, duration=False)
            target = settings.limits if path.startswith("limits.") else settings
            setattr(target, path.removeprefix("limits."), value)
        paths.append(path)
    return (settings if paths else None), paths


# The queue-setting flags of ``sepp queues declare`` and ``sepp queues update`` (one set).
PriorityFlag = Annotated[int | None, typer.Option("--priority", help="Default priority 0–9.")]
MaxAttemptsFlag = Annotated[int | None, typer.Option("--max-attempts", help="Default max attempts.")]
LeaseFlag = Annotated[str | None, typer.Option("--lease", help="Lease duration, e.g. 30s.")]
DedupFlag = Annotated[str | None, typer.Option("--dedup-window", help="Idempotency window, e.g. 24h.")]
RetryBaseFlag = Annotated[str | None, typer.Option("--retry-base", help="Backoff base, e.g. 1s.")]
RetryCapFlag = Annotated[str | None, typer.Option("--retry-cap", help="Backoff cap, e.g. 1h.")]
JitterFlag = Annotated[float | None, typer.Option("--retry-jitter", help="Jitter fraction, e.g. 0.2.")]
CompletedFlag = Annotated[str | None, typer.Option("--completed-retention", help="Keep completed jobs, e.g. 1d.")]
DeadFlag = Annotated[str | None, typer.Option("--dead-letter-retention", help="Keep dead letters, e.g. 14d.")]
PayloadFlag = Annotated[int | None, typer.Option(
    "--max-payload-bytes", help="Largest payload accepted, bytes (at most the server's max_message_bytes).")]
EncodingFlag = Annotated[list[str] | None, typer.Option(
    "--allowed-encoding", help="Allowed payload encoding (repeatable; '*' = any).")]
EntriesFlag = Annotated[int | None, typer.Option("--max-custom-entries", help="Most custom-map entries of a job.")]
KeyBytesFlag = Annotated[int | None, typer.Option(
    "--max-custom-key-bytes", help="Longest custom-map key, UTF-8 bytes.")]
CustomBytesFlag = Annotated[int | None, typer.Option(
    "--max-custom-bytes", help="Largest custom map, the sum of key bytes + value sizes, bytes.")]
ResultFlag = Annotated[int | None, typer.Option(
    "--max-result-bytes", help="Largest job result (a handler's return value) accepted, bytes (at most the "
    "server's max_message_bytes).")]
InFlightFlag = Annotated[int | None, typer.Option(
    "--max-in-flight", help="Most jobs RESERVED at once, across workers and nodes (0 = unlimited).")]
RateFlag = Annotated[str | None, typer.Option(
    "--rate-limit", help="Most reservations per period, e.g. 50/s or 1000/m ('' = unlimited).")]
BurstFlag = Annotated[int | None, typer.Option(
    "--rate-burst", help="Token bucket size for --rate-limit (0 = the per-period amount).")]
KeyFlag = Annotated[str | None, typer.Option(
    "--concurrency-key", help="Custom-map entry grouping jobs for --max-in-flight-per-key (tenant_id).")]
PerKeyFlag = Annotated[int | None, typer.Option(
    "--max-in-flight-per-key", help="Most jobs RESERVED at once per value of --concurrency-key (0 = unlimited).")]
ConsumerFlag = Annotated[str | None, typer.Option(
    "--consumer-timeout", help="Flag the queue 'no consumer' after READY jobs wait this long with no "
    "Reserve, e.g. 60s (0 = never).")]


def queue_flags(as_json: bool, **flags: Any) -> tuple[pb.QueueSettings | None, list[str]]:
    """``settings_from_flags`` of the flags of declare / update (CLI names: ``priority``,
    ``lease``, …); a refused value exits 2 (``fail_flag``)."""
    try:
        return settings_from_flags(
            default_priority=flags["priority"], default_max_attempts=flags["max_attempts"],
            lease_duration=flags["lease"], dedup_window=flags["dedup_window"], retry_base=flags["retry_base"],
            retry_cap=flags["retry_cap"], retry_jitter=flags["retry_jitter"],
            completed_retention=flags["completed_retention"], dead_letter_retention=flags["dead_letter_retention"],
            max_payload_bytes=flags["max_payload_bytes"], allowed_encodings=flags["allowed_encodings"] or [],
            max_custom_entries=flags["max_custom_entries"], max_custom_key_bytes=flags["max_custom_key_bytes"],
            max_custom_bytes=flags["max_custom_bytes"], max_result_bytes=flags["max_result_bytes"],
            max_in_flight=flags["max_in_flight"],
            rate_limit=flags["rate_limit"], rate_burst=flags["rate_burst"], concurrency_key=flags["concurrency_key"],
            max_in_flight_per_key=flags["max_in_flight_per_key"], consumer_timeout=flags["consumer_timeout"])
    except FlagValueError as exc:
        fail_flag(exc, as_json)
