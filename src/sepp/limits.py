"""Limits and queue settings with their documented defaults (SPEC §2, §7).

Shared by server, client and CLI. Sizes are bytes, durations are seconds (float).
These are pydantic models so the server can read them from TOML, ``SEPP_*``
variables and the admin API with validation; all are frozen.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

KiB = 1024
MiB = 1024 * KiB
HOUR = 3600.0
DAY = 24 * HOUR


class QueueLimits(BaseModel):
    """Per-queue limits a request is validated against (SPEC §2 catalogue)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Largest ``payload.data`` accepted, bytes; equal is allowed (seed: 1 MiB default).
    max_payload_bytes: int = Field(default=1 * MiB, ge=0)
    #: When non-empty, the only encoding labels accepted (exact match).
    allowed_encodings: tuple[str, ...] = ()
    #: Most custom-map entries.
    max_custom_entries: int = Field(default=32, ge=0)
    #: Longest custom key, UTF-8 bytes.
    max_custom_key_bytes: int = Field(default=64, ge=1)
    #: Largest custom map, Σ(key bytes + value size), bytes.
    max_custom_bytes: int = Field(default=8192, ge=0)


class QueueSettings(BaseModel):
    """Everything a queue carries besides its name (SPEC §1 "Queue", defaults §7)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default_priority: int = Field(default=5, ge=0, le=9)
    default_max_attempts: int = Field(default=10, ge=1)
    #: Lease length when Reserve gives none, seconds (1 ms to 1 day, like a Reserve's own).
    lease_duration: float = Field(default=30.0, ge=0.001, le=86_400)
    #: Idempotency window, seconds, anchored at the original enqueue (SPEC §6).
    dedup_window: float = Field(default=DAY, ge=0)
    #: Retry backoff: base × 2^(attempt−1), capped, ± jitter fraction (SPEC §3).
    retry_base: float = Field(default=1.0, ge=0)
    retry_cap: float = Field(default=HOUR, ge=0)
    retry_jitter: float = Field(default=0.2, ge=0, le=1)
    #: How long COMPLETED jobs are kept, seconds.
    completed_retention: float = Field(default=DAY, ge=0)
    #: How long DEAD_LETTERED (and CANCELLED) jobs are kept, seconds.
    dead_letter_retention: float = Field(default=14 * DAY, ge=0)
    limits: QueueLimits = QueueLimits()


class ServerLimits(BaseModel):
    """Server-wide limits (SPEC §2). ``max_message_bytes`` is enforced, not advertised."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_enqueue_batch: int = Field(default=256, ge=1)
    #: Ceiling for a job's ``max_attempts``.
    max_attempts_ceiling: int = Field(default=1000, ge=1)
    max_queue_name_bytes: int = Field(default=128, ge=1)
    max_job_type_bytes: int = Field(default=256, ge=1)
    #: How far ahead ``scheduled_at`` may be, seconds (365 days).
    max_schedule_horizon: float = Field(default=365 * DAY, gt=0)
    max_idempotency_key_bytes: int = Field(default=256, ge=1)
    max_encoding_bytes: int = Field(default=128, ge=1)
    max_trace_entries: int = Field(default=8, ge=0)
    #: ≥ 55: a traceparent (version 00) is 55 bytes long.
    max_trace_value_bytes: int = Field(default=512, ge=55)
    #: Whole gRPC message cap, bytes (16 MiB); always ≥ every queue's max_payload_bytes.
    max_message_bytes: int = Field(default=16 * MiB, ge=1024)
    #: Most jobs one Reserve may ask for.
    max_reserve_batch: int = Field(default=256, ge=1)
    #: Longest Reserve long-poll, seconds (SPEC §3: ≤ 30 s).
    max_reserve_wait: float = Field(default=30.0, ge=0, le=30.0)
    #: Longest error detail kept per attempt, bytes (SPEC §3: 16 KiB).
    max_error_detail_bytes: int = Field(default=16 * KiB, ge=0)
