"""A running job's page in Chromium follows the job without a reload: the progress a
handler reports appears, then the job completes and the page shows COMPLETED and the
result, and stops polling."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import duration_pb2
from playwright.sync_api import Page, expect
from support.admin import connect
from support.browser import UI_CONFIG, browser_fixture, page_fixture  # noqa: F401
from support.servers import backend_config
from support.stubs import CALL_TIMEOUT

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

pytestmark = [pytest.mark.browser,
              pytest.mark.sqlite_only(reason="backend-neutral (the page's polling); the fragment over HTTP runs "
                                      "on PostgreSQL in tests/integration/test_ui_job_live.py")]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-live")), {**UI_CONFIG, **backend_config(backend)}) as proc:
        yield proc


def test_a_reserved_jobs_page_shows_its_progress_then_its_result_without_a_reload(
        page: Page, srv: ServerProcess) -> None:
    with connect(srv.grpc_target) as stubs:
        job_id = stubs.enqueue("ui-live", "crunch")
        lease = stubs.reserve_job("ui-live", job_id).lease_id
        page.goto(f"{srv.http_url}/jobs/{job_id}")
        expect(page.locator("#job-live .badge").first).to_have_text("RESERVED")
        page.evaluate("window.__notReloaded = true")

        stubs.worker.ExtendLease(wpb.ExtendLeaseRequest(
            job_id=job_id, lease_id=lease, progress=json.dumps(0.5), extend_by=duration_pb2.Duration(seconds=30)),
            timeout=CALL_TIMEOUT)
        expect(page.locator("#job-progress-text")).to_have_text("50%")
        expect(page.locator("#job-progress-bar")).to_have_attribute("value", "50.0")

        stubs.worker.Ack(wpb.AckRequest(job_id=job_id, lease_id=lease, result=pb.Payload(
            data=b'{"answer": 42}', encoding="application/json")), timeout=CALL_TIMEOUT)
    expect(page.locator("#job-live .badge").first).to_have_text("COMPLETED")
    expect(page.locator("pre.result-json")).to_contain_text('"answer": 42')
    expect(page.locator("#job-live")).not_to_have_attribute("hx-trigger", "every 2s")
    assert page.evaluate("window.__notReloaded") is True
