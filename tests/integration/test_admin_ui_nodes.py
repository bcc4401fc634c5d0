"""The Nodes page of the admin web UI over plain HTTP (it shows the nodes: name,
address, version, last seen): every node sharing the store, live or gone, and the
storage backend; linked from the navigation."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from support.backends import PG_TEST_DSN
from support.servers import backend_config
from support.waiting import wait_for

from sepp import __version__
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

NODE = "ui-node"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    config = {"sweep_interval": 0.05, "node_name": NODE, **backend_config(backend)}
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-nodes")), config) as proc:
        yield proc


@pytest.fixture
def web(srv: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.http_url, timeout=20) as client:
        yield client


def _row(html: str, name: str) -> str:
    match = re.search(rf'<tr class="node[^"]*" data-node="{re.escape(name)}">(.*?)</tr>', html, re.S)
    assert match, html
    return match[0]


def test_the_nodes_page_lists_this_node_and_the_storage_and_is_in_the_navigation(
        web: httpx.Client, srv: ServerProcess, backend: str) -> None:
    assert 'href="/nodes"' in web.get("/").text
    page = web.get("/nodes")
    assert page.status_code == 200
    assert 'aria-current="page">Nodes</a>' in page.text
    row = _row(page.text, NODE)
    assert "this node" in row and ">live<" in row and "gone" not in row
    assert f"<td>{__version__}</td>" in row and "<code>127.0.0.1:" in row, row
    assert re.search(r"(just now|\d+ s ago)</time>", row), row
    storage = re.search(r'<p id="storage">Storage: <strong>([^<]*)</strong>', page.text)
    assert storage is not None
    if backend == "postgres":
        schema = srv.config["postgres"]["schema"]
        assert storage[1] == f"PostgreSQL, schema {schema} (persist group)"
        assert "postgresql://" not in page.text  # never the DSN
    else:
        assert storage[1] == f"SQLite, data folder {srv.data_dir} (persist group)"
    assert page.text.count('data-node="') == 1  # a SQLite store, or a fresh schema: this node only
    partial = web.get("/ui/partials/nodes")
    assert partial.status_code == 200 and 'id="nodes"' in partial.text and "<html" not in partial.text


@pytest.mark.postgres_only(reason="a node row written by another node: SQLite's folder holds one process")
def test_a_node_not_seen_for_over_the_bound_is_shown_as_gone(tmp_path: Path) -> None:
    # PostgreSQL only (no backend parameter): a SQLite store holds this node alone.
    import asyncpg

    config = {"node_name": NODE, **backend_config("postgres")}
    schema = config["postgres"]["schema"]
    last_seen = int(time.time() * 1e6) - 60_000_000  # a minute ago: over NODE_GONE_AFTER

    async def write() -> None:
        conn = await asyncpg.connect(PG_TEST_DSN)
        try:
            await conn.execute(f'INSERT INTO "{schema}".nodes (name, address, version, started_at, last_seen) '
                               "VALUES ($1, $2, $3, $4, $5)", "old-node", "10.0.0.9:7070", "0.0.1",
                               last_seen - 3_600_000_000, last_seen)
        finally:
            await conn.close()

    with ServerProcess(tmp_path, config) as srv, httpx.Client(base_url=srv.http_url, timeout=20) as web:
        asyncio.run(write())
        # The node list is read again with every heartbeat (5 s).
        html = wait_for(lambda: page if 'data-node="old-node"' in (page := web.get("/nodes").text) else None,
                        timeout=15, interval=0.1, what="the old node on /nodes")
    row = _row(html, "old-node")
    assert ">gone<" in row and "10.0.0.9:7070" in row and "<td>0.0.1</td>" in row and "this node" not in row
    assert re.search(r">1 min( \d+ s)? ago</time>", row), row
    assert ">live<" in _row(html, NODE)
    assert html.index('data-node="ui-node"') < html.index('data-node="old-node"')  # live first


def test_the_job_page_names_the_node_of_each_attempt(web: httpx.Client, srv: ServerProcess) -> None:
    with grpc.insecure_channel(srv.grpc_target) as ch:
        job_id = producer_pb2_grpc.ProducerServiceStub(ch).Enqueue(
            pb.EnqueueRequest(queue="ui-nodes-q", job_type="t")).job_id
        worker = worker_pb2_grpc.WorkerServiceStub(ch)
        (r,) = worker.Reserve(wpb.ReserveRequest(queues=["ui-nodes-q"], max_jobs=1, worker_id="w-ui")).reservations
        worker.Nack(wpb.NackRequest(job_id=job_id, lease_id=r.lease_id, dead_letter="no",
                                    error=wpb.JobError(message="boom")))
    html = web.get(f"/jobs/{job_id}").text
    assert f'<th scope="row">node</th><td>{NODE}</td>' in html
    assert re.search(rf"<td>w-ui</td>\s*<td>{NODE}</td>", html), html
