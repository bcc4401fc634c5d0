"""The queue gauges are cluster-wide on PostgreSQL: ``sepp_queue_jobs``,
``sepp_queue_oldest_ready_age_seconds`` and ``sepp_queue_paused`` on every node describe the
whole store — jobs enqueued, leased and acked through other nodes, a pause made on another
node — while the counters are each node's own (the docs' "sum the counters, max the gauges").
"""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from support.waiting import wait_for
from support.worker import Wire

from sepp.testing import ServerProcess

from .conftest import ClusterFactory

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(node: ServerProcess) -> Samples:
    """Every sample of one ``GET /metrics`` of ``node``."""
    with urllib.request.urlopen(node.http_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def val(samples: Samples, name: str, **labels: str) -> float | None:
    """One sample's value, None when the series is absent."""
    return samples.get((name, frozenset(labels.items())))


def test_every_node_shows_the_whole_store_in_the_queue_gauges_and_only_its_own_counts(
        cluster_factory: ClusterFactory) -> None:
    nodes = cluster_factory(2, metrics_gauge_interval=0.0)  # gauges read at every scrape: exact
    n1 = Wire(nodes[0].grpc_target, queue="shared")
    try:
        for _ in range(3):
            n1.enqueue()
        n1.ack(n1.reserve_one())
        n1.reserve_one()  # held: RESERVED
        n1.pause("shared")
        want = {"scheduled": 0, "ready": 1, "reserved": 1, "completed": 1, "dead_lettered": 0, "cancelled": 0}

        def gauges(node: ServerProcess) -> Samples | None:
            s = scrape(node)
            seen = {state: val(s, "sepp_queue_jobs", queue="shared", state=state) for state in want}
            return s if seen == want and val(s, "sepp_queue_paused", queue="shared") == 1 else None

        # n2 never saw a call for the queue: the counts come from the store, the pause from
        # the shared queue rows (its refresh, at most cluster.QUEUE_REFRESH_EVERY late).
        second = wait_for(lambda: gauges(nodes[1]), timeout=15, what="n2's gauges showing n1's work")
        first = wait_for(lambda: gauges(nodes[0]), timeout=15, what="n1's gauges")
        for s in (first, second):
            age = val(s, "sepp_queue_oldest_ready_age_seconds", queue="shared")
            assert age is not None and 0 <= age < 60
        # The counters are per node: n1 enqueued and acked, n2 did nothing.
        assert val(first, "sepp_jobs_enqueued_total", queue="shared") == 3
        assert val(first, "sepp_jobs_completed_total", queue="shared") == 1
        assert not val(second, "sepp_jobs_enqueued_total", queue="shared")
        assert not val(second, "sepp_jobs_completed_total", queue="shared")
    finally:
        n1.close()
