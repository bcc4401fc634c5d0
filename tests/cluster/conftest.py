"""Fixtures of the multi-node suite: several real ``sepp serve`` processes
sharing ONE PostgreSQL database schema.

* ``cluster_factory(n=3, **config)`` starts ``n`` nodes (``node_name`` n1, n2, …) on a
  schema of this test's own (``support.backends.fresh_schema``), all at once so the
  migration runs under its advisory lock with three contenders, and returns them started.
  ``config`` holds ServerConfig keys (nested dicts for ``queues`` …) given to every node,
  on top of ``CLUSTER_FAST`` (short sweeps, as ``support.servers.FAST``). Every node is
  stopped at teardown and the schema dropped.
* ``cluster`` is three default nodes.

The database is ``PG_TEST_DSN`` (env, default ``postgresql://postgres@127.0.0.1:5432/test``).
Under CI PostgreSQL is required: nothing here skips when it cannot be reached; a local run
without it skips these tests with one line saying why (``support.backends.needs_postgres``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.backends import CREATED_SCHEMAS, PG_TEST_DSN, fresh_schema

from sepp.testing import ServerProcess

#: Config of every cluster node unless the test says otherwise: short sweep interval so
#: lease expiry and promotion are observed quickly (as ``support.servers.FAST``).
CLUSTER_FAST: dict[str, Any] = {"sweep_interval": 0.05, "shutdown_grace": 5.0}

#: ``cluster_factory(n=3, **config)`` → the started nodes, in order n1, n2, ….
ClusterFactory = Callable[..., "Cluster"]


class Cluster(list[ServerProcess]):
    """The nodes of one test (a list, n1 first) plus the schema they share."""

    schema: str = ""


async def _drop_schema(schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_TEST_DSN, timeout=10)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


def start_all(nodes: list[ServerProcess]) -> None:
    """Start every node at the same time (threads) and wait until all serve; raises the
    first start failure (``RuntimeError`` with the node's last output lines)."""
    with ThreadPoolExecutor(len(nodes)) as pool:
        for fut in [pool.submit(n.start) for n in nodes]:
            fut.result()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[ClusterFactory]:
    """Start clusters on demand (see the module docstring); all stopped at teardown."""
    made: list[Cluster] = []

    def make(n: int = 3, **config: Any) -> Cluster:
        schema = fresh_schema()
        nodes = Cluster()
        nodes.schema = schema
        for i in range(1, n + 1):
            cfg = {**CLUSTER_FAST, "storage": "postgres", "postgres_dsn": PG_TEST_DSN,
                   "postgres": {"schema": schema}, "node_name": f"n{i}", **config}
            nodes.append(ServerProcess(tmp_path / f"n{i}-{len(made)}", cfg, ready_timeout=60.0))
        made.append(nodes)
        start_all(nodes)
        return nodes

    yield make
    for nodes in made:
        for node in nodes:
            with contextlib.suppress(Exception):
                node.terminate(timeout=15)
            node.kill()
        with contextlib.suppress(Exception):
            asyncio.run(_drop_schema(nodes.schema))
            CREATED_SCHEMAS.remove(nodes.schema)


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> Cluster:
    """Three default nodes n1, n2, n3 on one fresh schema."""
    return cluster_factory(3)
