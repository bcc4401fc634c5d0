"""Helpers of the browser tests: the Chromium fixtures, UI-friendly server config, job factories.

The fixtures live here rather than in a ``conftest.py`` (a second conftest module would clash
with ``tests/conftest.py`` under mypy); test modules import them by name. Without
/usr/bin/chromium the browser tests fail (``scripts/ensure-chromium.sh``). The job
factories go through ``support.admin.AdminStubs``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from support.admin import connect

CHROMIUM = os.environ.get("SEPP_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


#: The Playwright + Chromium of the current test module (sync Playwright allows one per
#: thread). Module scope, not session: sync Playwright keeps an event loop running in the
#: main thread while it is started, which would break the async tests that run later.
_SHARED: dict[str, Any] = {}


@pytest.fixture(scope="module", name="browser")
def browser_fixture() -> Iterator[Browser]:
    """One headless Chromium per test module. A missing Chromium fails (never skips)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/ensure-chromium.sh (apt-get install -y chromium)")
    if "browser" not in _SHARED:
        pw = sync_playwright().start()
        _SHARED["playwright"] = pw
        _SHARED["browser"] = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    yield _SHARED["browser"]
    if "browser" in _SHARED:
        _SHARED.pop("browser").close()
        _SHARED.pop("playwright").stop()


@pytest.fixture(name="page")
def page_fixture(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (own cookies) and page; dialogs (confirm) are accepted."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    # Deadlines for what the page does on its own (actions and ``expect``, 5 s by default):
    # waits that end as soon as the page is there, with room for a loaded machine.
    context.set_default_timeout(15_000)
    expect.set_options(timeout=15_000)
    pg = context.new_page()
    pg.on("dialog", lambda dialog: dialog.accept())
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # Console errors (a CSP violation, a script error) fail the test; HTTP error statuses the
    # tests provoke on purpose (400 rejection, 404) are logged as "Failed to load resource".
    pg.on("console", lambda msg: errors.append(msg.text)
          if msg.type == "error" and "Failed to load resource" not in msg.text else None)
    try:
        yield pg
    finally:
        context.close()
    # Scripts must run under the UI's Content-Security-Policy without errors.
    assert not errors, errors


#: Server config of the UI tests: a declared queue with a tiny payload limit.
UI_CONFIG: dict[str, Any] = {"sweep_interval": 0.05, "shutdown_grace": 5.0,
                             "queues": {"small": {"limits": {"max_payload_bytes": 16}}}}


def enqueue(target: str, queue: str, job_type: str = "t", **fields: Any) -> str:
    """Enqueue one job through the producer API; returns its id."""
    with connect(target) as stubs:
        return stubs.enqueue(queue, job_type, **fields)


def dead_letter(target: str, queue: str, job_type: str = "t", reason: str = "bad input",
                error: str = "it broke", **fields: Any) -> str:
    """Enqueue a job on ``queue``, Reserve it and Nack it with ``dead_letter`` through raw
    worker stubs; returns its id."""
    with connect(target) as stubs:
        return stubs.dead_letter(queue, job_type, reason, error, detail="Traceback: " + error,
                                 worker_id="ui-test", **fields)
