"""The Nodes page's formatting (``sepp.server.http.ui.views``): how long ago a node
was seen, when it counts as gone (over ``cluster.NODE_GONE_AFTER`` s), the order, and the
storage line. Pure functions: explicit times, no clock."""

from __future__ import annotations

from sepp.domain.records import NodeRecord
from sepp.server.cluster import HEARTBEAT_EVERY, NODE_GONE_AFTER
from sepp.server.http.ui.views import fmt_ago, node_views, storage_label

S = 1_000_000
NOW = 1_790_000_000_000_000


def test_how_long_ago_reads_in_seconds_then_minutes() -> None:
    assert [fmt_ago(s) for s in (0, 0.4, 3, 3.4, 59, 60, 125, 7200)] == [
        "just now", "just now", "3 s ago", "3 s ago", "59 s ago", "1 min ago", "2 min 5 s ago", "2 h ago"]


def test_a_node_is_gone_only_past_the_bound_and_gone_nodes_come_last() -> None:
    assert NODE_GONE_AFTER == 3 * HEARTBEAT_EVERY == 15
    nodes = [NodeRecord("a", "h:1", "1.0", NOW - 99 * S, NOW - 16 * S),
             NodeRecord("b", "h:2", "1.0", NOW - 99 * S, NOW - 15 * S),
             NodeRecord("c", "h:3", "1.1", NOW - 9 * S, NOW + S)]  # a clock a little ahead
    views = node_views(nodes, NOW, "c", NODE_GONE_AFTER)
    assert [(v.name, v.gone, v.this, v.seen_ago) for v in views] == [
        ("b", False, False, 15.0), ("c", False, True, 0.0), ("a", True, False, 16.0)]
    assert views[0].address == "h:2" and views[0].started_at == NOW - 99 * S and views[0].last_seen == NOW - 15 * S
    assert node_views([], NOW, "c", NODE_GONE_AFTER) == []


def test_the_storage_line_names_the_backend_and_never_a_dsn() -> None:
    assert storage_label("postgres", "sepp", "./data", "group") == "PostgreSQL, schema sepp (persist group)"
    assert storage_label("sqlite", "sepp", "/srv/sepp", "sync") == "SQLite, data folder /srv/sepp (persist sync)"
