"""What the admin side's writes answer and what its figures read: the verdict of a
single-job write (``Outcome``, ``WriteResult``), jobs per state (``StateCounts``), the
throughput of a queue in a minute (``MinuteRow``) and the reads behind the ``/metrics`` gauges
(``QueueGauges``) and the held-back view (``FlowRead``). Job listings: ``domain.listing``.

The storage seam's ``AdminStore`` returns them and the admin engine, the web UI and the RPC
edge read them, so they live here, below all of them (the ``http-rpc-no-storage`` contract).
Times are integer µs since the epoch (UTC).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Outcome(enum.Enum):
    """The verdict of a single-job admin write."""

    DONE = "done"
    NOT_FOUND = "not_found"
    WRONG_STATE = "wrong_state"
    CANCEL_REQUESTED = "cancel_requested"   # RESERVED: asked cooperatively
    UNCHANGED = "unchanged"                 # already in the target state


@dataclass(frozen=True, slots=True)
class WriteResult:
    """``outcome`` plus the job's queue and state as found (0 / "" when not found)."""

    outcome: Outcome
    queue: str = ""
    state: int = 0


@dataclass(frozen=True, slots=True)
class StateCounts:
    """Jobs per state of one queue."""

    scheduled: int = 0
    ready: int = 0
    reserved: int = 0
    completed: int = 0
    dead_lettered: int = 0
    cancelled: int = 0
    #: Waiting for the jobs they depend on (docs/workflows.md).
    deferred: int = 0

    @property
    def total(self) -> int:
        """Jobs of every state."""
        return (self.scheduled + self.ready + self.reserved + self.completed + self.dead_lettered
                + self.cancelled + self.deferred)


@dataclass(frozen=True, slots=True)
class QueueGauges:
    """What the ``/metrics`` queue gauges show, read in one call: ``counts`` the
    jobs per state of every queue with jobs (``state_counts(None)``), ``oldest_ready`` the
    smallest run_at (µs UTC) of the READY jobs of every queue that has some."""

    counts: dict[str, StateCounts]
    oldest_ready: dict[str, int]
    #: Queue → the latest Reserve by a worker of another node (µs UTC), from the worker rows:
    #: filled in by the server's metrics read for ``sepp_queue_no_consumer``, not
    #: by the store's ``queue_gauges``.
    last_reserve: dict[str, int] = field(default_factory=dict)
    #: Queue → enqueued_at (µs UTC) of its DEFERRED job of lowest enqueue sequence, for every
    #: queue that has DEFERRED jobs (``AdminStore.oldest_deferred``).
    oldest_deferred: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FlowRead:
    """What the held-back view of a flow-limited queue reads from the store
    (``AdminStore.flow_read``): ``bucket`` the stored token bucket (tokens,
    updated_at µs) or None (never used, or no rate limit asked for); ``key_allowed`` /
    ``key_scanned`` the per-key limit's ``flow_keys.key_room`` (0, 0 without one)."""

    bucket: tuple[float, int] | None = None
    key_allowed: int = 0
    key_scanned: int = 0


@dataclass(frozen=True, slots=True)
class MinuteRow:
    """Throughput of one queue in one minute (``minute`` = µs // 60,000,000)."""

    queue: str
    minute: int
    enqueued: int
    completed: int
    dead_lettered: int
