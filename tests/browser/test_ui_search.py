"""The header's search box in Chromium: a custom entry, a type and an error
search listed on /search, a bare job id straight to the job's page, text it cannot read
shown with its message, and paging."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.browser import UI_CONFIG, browser_fixture, dead_letter, enqueue, page_fixture  # noqa: F401
from support.servers import backend_config

from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess

pytestmark = [pytest.mark.browser,
              pytest.mark.sqlite_only(reason="backend-neutral (the page); the search itself runs on both backends "
                                      "in tests/storage/test_conformance_search.py and tests/acceptance")]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module."""
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-search")), {**UI_CONFIG, **backend_config(backend)}) as proc:
        yield proc


def _custom(**entries: int | str) -> dict[str, pb.CustomValue]:
    return {k: pb.CustomValue(int_value=v) if isinstance(v, int) else pb.CustomValue(string_value=v)
            for k, v in entries.items()}


def _search(page: Page, srv: ServerProcess, text: str) -> None:
    """Type ``text`` into the header's box on the dashboard and submit it."""
    page.goto(srv.http_url + "/")
    page.fill("#find-q", text)
    page.press("#find-q", "Enter")


def test_the_search_box_finds_jobs_by_custom_entry_type_and_error(page: Page, srv: ServerProcess) -> None:
    target = srv.grpc_target
    mine = [enqueue(target, "ui-search", "send_email", custom=_custom(user_id=42, tenant="acme")) for _ in range(2)]
    enqueue(target, "ui-search", "send_email", custom=_custom(user_id=7))
    failed = dead_letter(target, "ui-search-dead", "charge", error="Card declined by issuer")

    _search(page, srv, "custom.user_id = 42")
    expect(page).to_have_url(f"{srv.http_url}/search?q=custom.user_id+%3D+42")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(2)
    for job_id in mine:
        expect(page.locator(f"a[href='/jobs/{job_id}']")).to_be_visible()
    expect(page.locator("#search-page-q")).to_have_value("custom.user_id = 42")

    page.fill("#search-page-q", 'custom.user_id=42 custom.tenant=nobody')
    page.press("#search-page-q", "Enter")
    expect(page.locator("#search-empty")).to_be_visible()

    _search(page, srv, 'error:"card DECLINED" state:dead_lettered')
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Card declined by issuer")
    page.click(f"a[href='/jobs/{failed}']")
    expect(page).to_have_url(f"{srv.http_url}/jobs/{failed}")

    _search(page, srv, "type:charge")
    expect(rows).to_have_count(1)


def test_a_bare_job_id_goes_to_its_page_and_bad_text_is_explained(page: Page, srv: ServerProcess) -> None:
    job_id = enqueue(srv.grpc_target, "ui-search-id")
    _search(page, srv, job_id)
    expect(page).to_have_url(f"{srv.http_url}/jobs/{job_id}")

    _search(page, srv, "colour:red")
    expect(page.locator("#search-error")).to_contain_text("unknown search field 'colour'")
    _search(page, srv, "custom.note=" + "x" * 257)
    expect(page.locator("#search-error")).to_contain_text("longer than 256 bytes")


def test_search_results_page_in_enqueue_order(page: Page, srv: ServerProcess) -> None:
    ids = [enqueue(srv.grpc_target, "ui-search-pages", custom=_custom(batch="b-1")) for _ in range(51)]
    _search(page, srv, "custom.batch=b-1")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text(ids[0])
    page.click("#search-next")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(ids[50])
