"""The Workers page's view of the cluster: every worker that called within the last
hour, from the rows each node reports (``Store.workers``) and this node's own fresher ones,
with its jobs in flight from the store and whether it has gone quiet.

A worker id seen by several nodes (a worker behind a load balancer) is one entry: its
nodes listed, its counts summed, its times the latest. "Stopped" = it stopped cleanly: the
latest ``stopped_at`` among its rows is not before its latest Reserve on any node (so a Reserve
on another node after the stop wins; a row of a node that only saw the stop, no Reserve, is
merged but lists nobody on its own). "Quiet" = not stopped and no call within two lease
periods: twice the longest ``lease_duration`` among its queues (the queue defaults' for a
queue this node does not know).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sepp.domain.records import WorkerRecord
from sepp.server.queues import QueueRegistry

_US = 1_000_000


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker on the Workers page (times µs UTC; counts over the last 60 s)."""

    worker_id: str
    host: str
    queues: tuple[str, ...]
    concurrency: int
    client_version: str
    nodes: tuple[str, ...]
    in_flight: int
    first_seen: int
    last_reserve: int
    last_seen: int
    completed_last_minute: int
    failed_last_minute: int
    quiet: bool
    #: Seconds since ``last_seen`` at the time of the listing.
    idle: float
    #: When it stopped cleanly (µs UTC), 0 while it runs (live or quiet).
    stopped_at: int = 0

    @property
    def state(self) -> str:
        """``live``, ``quiet`` or ``stopped``."""
        return "stopped" if self.stopped_at else "quiet" if self.quiet else "live"


def quiet_after(queues: Iterable[str], registry: QueueRegistry) -> float:
    """Seconds without a call after which a worker of ``queues`` counts as quiet: two lease
    periods of the longest lease among them (the defaults' for unknown queues or none)."""
    leases = []
    for name in queues:
        q = registry.get(name)
        leases.append(q.settings.lease_duration if q is not None else registry.defaults.lease_duration)
    return 2 * max(leases or [registry.defaults.lease_duration])


def merge_workers(rows: Iterable[WorkerRecord], in_flight: Mapping[str, int], registry: QueueRegistry,
                  now: int) -> list[WorkerView]:
    """One ``WorkerView`` per worker id of ``rows`` (one row per worker and node), live ones
    first by most recent call, then the quiet ones, then the stopped ones, each likewise (see
    the module docstring)."""
    by_id: dict[str, list[WorkerRecord]] = {}
    for row in rows:
        by_id.setdefault(row.worker_id, []).append(row)
    views = []
    for worker_id, group in by_id.items():
        latest = max(group, key=lambda r: r.last_reserve)
        if not latest.last_reserve:
            continue  # only a stop, no Reserve on any node: nobody to list
        stopped_at = max(r.stopped_at for r in group)
        if stopped_at < latest.last_reserve:
            stopped_at = 0  # it reserved again since (on some node): running
        last_seen = max(r.last_seen for r in group)
        idle = max(0.0, (now - last_seen) / _US)
        views.append(WorkerView(
            worker_id, latest.host, latest.queues, latest.concurrency, latest.client_version,
            tuple(sorted({r.node for r in group})), in_flight.get(worker_id, 0),
            min(r.first_seen for r in group), latest.last_reserve, last_seen, sum(r.completed_minute for r in group),
            sum(r.failed_minute for r in group), not stopped_at and idle > quiet_after(latest.queues, registry), idle,
            stopped_at))
    return sorted(views, key=lambda v: (bool(v.stopped_at), v.quiet, -v.last_seen, v.worker_id))
