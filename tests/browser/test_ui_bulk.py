"""Bulk actions and job-type figures in Chromium: a bulk requeue of
every matching dead letter after its dry-run count, with the progress page; a requeue of
ticked jobs (the header checkbox ticks a page); the queue page's job-type table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.browser import UI_CONFIG, browser_fixture, dead_letter, page_fixture  # noqa: F401
from support.servers import backend_config

from sepp.testing import ServerProcess

pytestmark = [pytest.mark.browser,
              pytest.mark.sqlite_only(reason="backend-neutral (the pages and their JavaScript); the bulk runs are "
                                      "tested on both backends in tests/engine/test_engine_bulk.py")]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module; each test uses its own queue."""
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-bulk")), {**UI_CONFIG, **backend_config(backend)}) as proc:
        yield proc


def test_every_matching_dead_letter_is_requeued_after_the_dry_run_count(page: Page, srv: ServerProcess) -> None:
    queue = "ui-bulk-all"
    for _ in range(7):
        dead_letter(srv.grpc_target, queue, "resize")
    for _ in range(2):
        dead_letter(srv.grpc_target, queue, "other")
    page.goto(f"{srv.http_url}/queues/{queue}?state=dead_lettered&job_type=resize")
    page.click("a.button:has-text('Requeue all matching')")
    # The dry run: the count of the filter (type resize only), nothing changed yet.
    expect(page.locator("#dry-run-count strong[data-matched]")).to_have_text("7")
    expect(page.locator("#dry-run-count")).to_contain_text("DEAD_LETTERED")
    page.goto(f"{srv.http_url}/queues/{queue}?state=dead_lettered")
    expect(page.locator("nav.tabs .state-dead_lettered .n")).to_have_text("9")
    page.go_back()
    page.click("button:has-text('Requeue 7 job(s)')")
    # The progress page polls until the run ends.
    expect(page.locator("#bulk-finished")).to_be_visible()
    expect(page.locator("#bulk-done")).to_have_text("7")
    expect(page.locator("#bulk-seen")).to_have_text("7")
    page.click("a:has-text('Back to the queue')")
    expect(page.locator("nav.tabs .state-ready .n")).to_have_text("7")
    expect(page.locator("nav.tabs .state-dead_lettered .n")).to_have_text("2")


def test_ticked_jobs_are_requeued_and_the_header_box_ticks_the_page(page: Page, srv: ServerProcess) -> None:
    queue = "ui-bulk-ticked"
    ids = [dead_letter(srv.grpc_target, queue, "mail") for _ in range(3)]
    page.goto(f"{srv.http_url}/queues/{queue}?state=dead_lettered")
    page.check("input[data-select-all]")
    expect(page.locator("input[name=job_id]:checked")).to_have_count(3)
    expect(page.locator("[data-selected-count]")).to_have_text("3 selected:")
    page.uncheck(f"input[name=job_id][value='{ids[0]}']")
    expect(page.locator("[data-selected-count]")).to_have_text("2 selected:")
    page.click("button:has-text('Requeue selected')")
    expect(page.locator(".flash-ok")).to_contain_text("Requeued 2 of 2 selected job(s)")
    expect(page.locator("nav.tabs .state-ready .n")).to_have_text("2")
    expect(page.locator("nav.tabs .state-dead_lettered .n")).to_have_text("1")


def test_the_queue_page_shows_each_job_types_figures(page: Page, srv: ServerProcess) -> None:
    queue = "ui-bulk-types"
    for _ in range(2):
        dead_letter(srv.grpc_target, queue, "render")
    page.goto(f"{srv.http_url}/queues/{queue}")
    row = page.locator("#job-types tr[data-job-type='render']")
    expect(row).to_be_visible()
    cells = row.locator("td")
    expect(cells).to_have_count(12)                  # six figures for the hour, six for the day
    expect(cells.nth(2)).to_have_text("2")           # dead-lettered in the last hour
    expect(cells.nth(5)).not_to_have_text("–")       # a max run time
