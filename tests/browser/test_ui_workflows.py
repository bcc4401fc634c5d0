"""The workflow pages in Chromium (docs/workflows.md "Seeing and steering a workflow"): from
the header to the list, a workflow's graph with each node coloured by state and linked to its
job, the Cancel workflow button (confirm accepted, CSRF token sent) and the page after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.browser import UI_CONFIG, browser_fixture, page_fixture  # noqa: F401
from support.servers import backend_config

from sepp import Client, EnqueueRequest, Workflow
from sepp.testing import ServerProcess

pytestmark = [pytest.mark.browser,
              pytest.mark.sqlite_only(reason="backend-neutral (the pages); the reads and the cancel run on both "
                                      "backends in tests/storage and tests/integration")]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-wf")), {**UI_CONFIG, **backend_config(backend)}) as proc:
        yield proc


def test_a_workflow_from_the_list_to_its_graph_and_cancelled(page: Page, srv: ServerProcess) -> None:
    wf = Workflow()
    a = wf.add(EnqueueRequest("ui-wf", "extract"))
    b = wf.add(EnqueueRequest("ui-wf", "transform"), after=[a])
    wf.add(EnqueueRequest("ui-wf", "load"), after=[b])
    with Client(srv.grpc_target) as client:
        ack = client.enqueue_workflow(wf)
    page.goto(srv.http_url + "/")
    page.click("nav >> text=Workflows")
    page.click(f"a:has-text('{ack.workflow_id}')")
    expect(page.locator("[data-testid=wf-status]")).to_have_text("running")
    nodes = page.locator("svg a.wf-node")
    expect(nodes).to_have_count(3)
    expect(page.locator("svg a.wf-node.st-ready")).to_have_count(1)
    expect(page.locator("svg a.wf-node.st-deferred")).to_have_count(2)
    expect(page.locator("svg line.wf-edge")).to_have_count(2)
    page.click("button:has-text('Cancel workflow')")  # the confirm dialog is accepted
    expect(page.locator(".flash-ok")).to_contain_text("3 node(s) cancelled")
    expect(page.locator("[data-testid=wf-status]")).to_have_text("finished")
    expect(page.locator("svg a.wf-node.st-cancelled")).to_have_count(3)
    expect(page.locator("table.wf-failed tbody tr")).to_have_count(3)
    page.locator("svg a.wf-node[data-index='2']").click()
    expect(page).to_have_url(f"{srv.http_url}/jobs/{ack.acks[2].job_id}")
