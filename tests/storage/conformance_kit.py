"""Helpers of the storage conformance suite: fixed times, row builders, short-hands for the
operations the tests repeat. Backend-neutral: only ``sepp.domain`` and the storage seam.

Times are integer µs UTC, passed in explicitly (no clock, no sleeps).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence

from sepp.domain.params import ReserveParams, SettleKind, SettleParams, SettleResult
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.records import Dedups, JobRecord, JobRow, QueueRecord
from sepp.domain.states import State
from sepp.storage.base import Store

#: A fixed "now" (2026-09-21), µs UTC, and one second in µs.
NOW = 1_790_000_000_000_000
S = 1_000_000
#: Lease length the helpers use, µs.
LEASE = 30 * S
#: Reason a retry/expiry gives a job whose cancel was requested while it ran (SPEC §1).
CANCELLED_WHILE_RESERVED = "cancelled by admin while reserved"
#: Default policy of the suite: no jitter, so backoff times are exact.
POLICY = PolicyTable(QueuePolicy(jitter=0.0))


#: Opens a store of the backend under test (``conftest.store_factory``): fresh on the first
#: call, the same data on later calls.
StoreFactory = Callable[[], Awaitable[Store]]


def row(queue: str = "q", *, state: State = State.READY, priority: int = 0, run_at: int = NOW,
        max_attempts: int = 3, payload: bytes = b"p", key: str | None = None, job_type: str = "t",
        enqueued_at: int = NOW, encoding: str = "", extras: bytes | None = None) -> JobRow:
    """A valid job row with a fresh random 16-byte id."""
    return JobRow(os.urandom(16), queue, job_type, int(state), priority, run_at, enqueued_at, max_attempts,
                  payload, encoding, extras, key)


async def put(store: Store, *rows: JobRow, until: Sequence[int] | None = None, now: int = NOW,
              new_queues: Sequence[QueueRecord] = ()) -> Dedups:
    """Enqueue ``rows`` in one call; keys (if any) claimed until ``until`` (default now + 1 h)."""
    deadlines = list(until) if until is not None else [now + 3600 * S] * len(rows)
    return await store.enqueue(list(rows), deadlines, now, new_queues)


async def lease(store: Store, *queues: str, n: int = 1, now: int = NOW, lease_us: int = LEASE,
                worker: str = "w", max_bytes: int = 0, node: str = "") -> list[JobRecord]:
    """Reserve up to ``n`` jobs from ``queues`` (default ``"q"``) in order, leased by the
    node named ``node``."""
    names = list(queues) or ["q"]
    return await store.reserve(ReserveParams(names, n, now, dict.fromkeys(names, lease_us), worker, max_bytes,
                                             node))


async def get(store: Store, job_id: bytes) -> JobRecord:
    """The job, which must exist."""
    rec = await store.get_job(job_id)
    assert rec is not None, f"job {job_id.hex()} is gone"
    return rec


async def settle1(store: Store, rec: JobRecord, kind: SettleKind, now: int, *, lease_id: bytes | None = None,
                  policy: PolicyTable = POLICY, delay: int = -1, reason: str = "", outcome: str = "",
                  error_message: str = "", error_detail: str = "") -> SettleResult:
    """Settle one leased job (its own lease unless ``lease_id`` is given); the other
    arguments are ``SettleParams``'s."""
    lid = rec.lease_id if lease_id is None else lease_id
    assert lid is not None
    item = SettleParams(rec.id, lid, kind, now, delay, reason, outcome, error_message, error_detail)
    (result,) = await store.settle([item], policy)
    return result
