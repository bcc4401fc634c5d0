"""A duplicate node name is reported once, a crashed predecessor's row is not (the UI
shows the nodes; found by attacking it: after a kill -9 and a restart, the node
warned about "another node named …" — its own previous process's last heartbeat).

``Cluster._check_unique`` runs before each heartbeat after the first: the node's row must
still carry this process's ``started_at``; only a second live process of the same name
rewrites it."""

from __future__ import annotations

import logging

import pytest

from engine.engine_kit import Harness
from sepp import __version__
from sepp.domain.records import NodeRecord
from sepp.server.cluster import Cluster

S = 1_000_000


async def test_a_crashed_predecessors_row_is_not_a_duplicate_but_a_live_twin_is(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    h = harness
    # The previous process of node "n" beat a second ago, then was killed.
    await h.store.heartbeat(NodeRecord("n", "127.0.0.1:1", __version__, h.now - 60 * S, h.now - S))
    node = Cluster(h.parts, "n", "127.0.0.1:2", heartbeat_every=3600)
    caplog.set_level(logging.WARNING, logger="sepp")
    await node.start()
    try:
        h.clock.advance(5)
        await node._check_unique()  # the next beat: the row is still this process's
        await node._beat()
        assert "node names must be unique" not in caplog.text
        # A second live process named "n" beats in between.
        await h.store.heartbeat(NodeRecord("n", "127.0.0.1:3", __version__, h.now + 1, h.now + 2))
        h.clock.advance(5)
        await node._check_unique()
        await node._beat()
        await node._check_unique()  # once is enough
        warned = [r for r in caplog.records if "node names must be unique" in r.getMessage()]
        assert len(warned) == 1 and "127.0.0.1:3" in warned[0].getMessage()
    finally:
        await node.stop()
