"""GetServerInfo shows the whole cluster: on every node, within one
heartbeat (``cluster.HEARTBEAT_EVERY``, 5 s), the three nodes by name and address, with
storage "postgres"."""

from __future__ import annotations

import time

from support.producer import connect
from support.waiting import wait_for

from sepp import __version__
from sepp.server.cluster import HEARTBEAT_EVERY
from sepp.testing import ServerProcess


def test_every_node_lists_all_three_nodes_within_a_heartbeat(cluster: list[ServerProcess]) -> None:
    started = time.monotonic()
    names = {"n1", "n2", "n3"}
    addresses = {f"n{i}": node.grpc_target for i, node in enumerate(cluster, 1)}
    seen_all: dict[str, float] = {}
    for i, node in enumerate(cluster, 1):
        with connect(node.grpc_target) as stubs:
            def all_listed() -> bool:
                info = stubs.info()
                return {n.name for n in info.nodes} == names
            wait_for(all_listed, timeout=HEARTBEAT_EVERY + 2.0, interval=0.05, what=f"n{i} to list every node")
            seen_all[f"n{i}"] = time.monotonic() - started
            info = stubs.info()
        assert info.storage == "postgres"
        assert info.node == f"n{i}"
        by_name = {n.name: n for n in info.nodes}
        for name, n in by_name.items():
            assert n.address == addresses[name], (name, n.address, addresses)
            assert n.version == __version__
            assert n.started_at.ToMicroseconds() <= n.last_seen.ToMicroseconds() <= time.time() * 1e6 + 1e6
    print(f"all nodes listed everywhere after {max(seen_all.values()):.2f} s: {seen_all}")
    assert max(seen_all.values()) < HEARTBEAT_EVERY + 2.0
