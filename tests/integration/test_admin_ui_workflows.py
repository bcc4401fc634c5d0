"""The UI's workflow pages over plain HTTP against a real server (docs/workflows.md "Seeing and
steering a workflow"): the list newest first, a workflow's graph with each node's state and
link, a large workflow summarised by job type (at the limit and one past it), the failed
nodes, and the Cancel workflow button behind the CSRF token."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.servers import backend_config

from sepp import Client, EnqueueRequest, chain, group
from sepp.server.http.ui.workflow_graph import MAX_DRAWN
from sepp.testing import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-wf")), backend_config(backend)) as proc:
        yield proc


@pytest.fixture
def web(srv: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.http_url, timeout=30) as client:
        yield client


@pytest.fixture
def client(srv: ServerProcess) -> Iterator[Client]:
    with Client(srv.grpc_target) as c:
        yield c


def _q() -> str:
    return f"uiwf-{uuid.uuid4().hex[:8]}"


def _csrf(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match
    return match[1]


def test_the_list_and_a_chains_graph_then_cancel(web: httpx.Client, client: Client) -> None:
    q = _q()
    older = client.enqueue_workflow(chain(EnqueueRequest(q, "first")))
    ack = client.enqueue_workflow(chain(EnqueueRequest(q, "extract"), EnqueueRequest(q, "load")))
    listing = web.get("/workflows")
    assert listing.status_code == 200
    assert listing.text.index(ack.workflow_id) < listing.text.index(older.workflow_id)  # newest first
    assert 'href="/workflows"' in listing.text  # in the header
    page = web.get(f"/workflows/{ack.workflow_id}")
    assert page.status_code == 200
    text = page.text
    for a in ack.acks:
        assert f'href="/jobs/{a.job_id}"' in text
    assert text.count('class="wf-edge"') == 1 and "st-ready" in text and "st-deferred" in text
    assert "Cancel workflow" in text and "running" in text
    refused = web.post(f"/workflows/{ack.workflow_id}/cancel", data={"csrf_token": "wrong"})
    assert refused.status_code == 403
    done = web.post(f"/workflows/{ack.workflow_id}/cancel", data={"csrf_token": _csrf(text), "reason": "ui test"},
                    follow_redirects=True)
    assert done.status_code == 200 and "2 node(s) cancelled" in done.text
    assert "Cancel workflow" not in done.text and "finished" in done.text
    assert done.text.count("ui test") == 2  # both failed nodes listed with the reason
    assert web.get("/workflows/01900000-0000-7000-8000-000000000000").status_code == 404
    assert web.get("/workflows/nope").status_code == 400


@pytest.mark.parametrize("extra", [0, 1])
def test_a_workflow_is_drawn_up_to_the_limit_and_summarised_past_it(web: httpx.Client, client: Client,
                                                                     extra: int) -> None:
    q = _q()
    reqs = [EnqueueRequest(q, "a" if i % 2 else "b") for i in range(MAX_DRAWN + extra)]
    ack = client.enqueue_workflow(group(reqs))
    text = web.get(f"/workflows/{ack.workflow_id}").text
    if extra:
        assert "summarised by job type" in text and 'class="wf-node' not in text
        assert re.search(r"<td>a</td>", text) and re.search(r"<td>b</td>", text)
    else:
        assert text.count('class="wf-node') == MAX_DRAWN
