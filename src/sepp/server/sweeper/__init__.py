"""Sweeps: small single-duty passes over indexed rows (STYLE habit 13).

* ``promote`` — SCHEDULED → READY when due; sleeps until the next due time, so a due
  job is reservable within milliseconds (reserve also promotes on its own).
* ``reclaim`` — expired leases → READY, or DEAD_LETTERED (LEASE_EXPIRED) on the last attempt.
* ``prune`` — finished jobs past retention; idempotency keys past their window.

A row a pass cannot process is skipped, logged with its job id and queue and counted; the
other rows are still handled in that pass (docs/decisions.md).
"""

from __future__ import annotations

from sepp.server.sweeper.runner import Sweeper

__all__ = ["Sweeper"]
