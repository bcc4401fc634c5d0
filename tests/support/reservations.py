"""Jobs for the Reserve answer's wire tests (``ReservationWriter`` against
``fill_reservation``): ``leased_record`` is a plain leased job at ``NOW``, its id, payload
and sequence number told apart by ``n``."""

from __future__ import annotations

from typing import Any

from sepp.storage.base import JobRecord

#: The time of every job here (µs since the epoch, with a fraction of a second).
NOW = 1_790_000_000_123_456


def leased_record(n: int = 0, **changes: Any) -> JobRecord:
    """A plain leased job (queue ``emails``, kind ``welcome``, a JSON payload naming ``n``,
    leased by ``host:1`` on ``node-a`` for 30 s), with ``changes`` applied."""
    base = JobRecord(bytes([n % 256]) * 15 + b"\x01", "emails", "welcome", 2, 5, NOW - 7, NOW - 9, 2, 25,
                     b'{"a": %d}' % n, "application/json", None, None, b"\x02" * 16, NOW + 30_000_000, "host:1",
                     NOW, None, None, None, 0, 42 + n, "node-a")
    return base._replace(**changes)
