"""UI safety (SPEC §4): user data is escaped, state changes need CSRF tokens, auth needs a login."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.browser import UI_CONFIG, browser_fixture, dead_letter, enqueue, page_fixture  # noqa: F401
from support.servers import backend_config

from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess

pytestmark = [pytest.mark.browser,
              pytest.mark.sqlite_only(reason="backend-neutral (the pages' JavaScript); the UI over HTTP runs on "
                                      "PostgreSQL in tests/integration/test_admin_ui_http.py")]

ServerFactory = Callable[..., ServerProcess]
XSS = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-safety")), {**UI_CONFIG, **backend_config(backend)}) as proc:
        yield proc


def test_payload_custom_values_and_errors_with_script_tags_render_as_text(page: Page, srv: ServerProcess) -> None:
    job_id = dead_letter(srv.grpc_target, "ui-xss", job_type="<b>bold</b>", error=XSS,
                         payload=pb.Payload(data=XSS.encode(), encoding="text/html"),
                         custom={"note": pb.CustomValue(string_value=XSS)}, idempotency_key=XSS)
    json_id = enqueue(srv.grpc_target, "ui-xss", payload=pb.Payload(data=b'{"html": "' + XSS.replace('"', '\\"')
                                                                    .encode() + b'"}', encoding="application/json"))
    for path in (f"/jobs/{job_id}", f"/jobs/{json_id}", "/dead?queue=ui-xss", "/queues/ui-xss?state=dead-lettered",
                 "/"):
        page.goto(srv.http_url + path)
        page.wait_for_load_state("load")
        assert page.evaluate("window.__pwned") is None, path
        assert page.locator("b", has_text="bold").count() == 0, path
        assert page.locator("img[src=x]").count() == 0, path
    page.goto(f"{srv.http_url}/jobs/{job_id}")
    expect(page.locator("pre.payload")).to_have_text(XSS)
    expect(page.locator("section[aria-labelledby=custom-h] td.value")).to_have_text(XSS)
    expect(page.locator("table.attempts td.err").first).to_contain_text(XSS)
    expect(page.locator("table.kv")).to_contain_text("<b>bold</b>")


def test_the_enqueue_result_escapes_what_was_typed(page: Page, srv: ServerProcess) -> None:
    page.goto(f"{srv.http_url}/enqueue")
    page.fill("#queue", "ui-xss-form")
    page.fill("#job_type", XSS)
    page.fill("#ck1", "k")
    page.fill("#cv1", XSS)
    page.click("button[type=submit].primary")
    expect(page.locator("#ack-job-id")).to_be_visible()
    expect(page.locator("#job_type")).to_have_value(XSS)
    assert page.evaluate("window.__pwned") is None


def test_a_state_changing_post_without_the_csrf_token_is_refused(page: Page, srv: ServerProcess) -> None:
    enqueue(srv.grpc_target, "ui-csrf")
    page.goto(f"{srv.http_url}/queues/ui-csrf")  # the session gets its token
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    assert token
    missing = page.request.post(f"{srv.http_url}/queues/ui-csrf/pause", form={}, max_redirects=0)
    assert missing.status == 403
    wrong = page.request.post(f"{srv.http_url}/queues/ui-csrf/pause", form={"csrf_token": "x" * 43},
                              max_redirects=0)
    assert wrong.status == 403
    foreign = page.context.browser.new_context()  # type: ignore[union-attr]
    try:  # the right token but another session (no cookie): refused as well
        other = foreign.request.post(f"{srv.http_url}/queues/ui-csrf/pause", form={"csrf_token": token},
                                     max_redirects=0)
        assert other.status == 403
    finally:
        foreign.close()
    page.goto(f"{srv.http_url}/queues/ui-csrf")
    expect(page.locator("h1 .badge.paused")).to_have_count(0)  # nothing changed
    ok = page.request.post(f"{srv.http_url}/queues/ui-csrf/pause", form={"csrf_token": token}, max_redirects=0)
    assert ok.status == 303
    header = page.request.post(f"{srv.http_url}/queues/ui-csrf/resume", headers={"X-CSRF-Token": token},
                               max_redirects=0)
    assert header.status == 303


def test_with_auth_on_every_page_redirects_to_the_login(page: Page, server_factory: ServerFactory) -> None:
    server = server_factory(admin_token="ui-s3cret")
    job_id = enqueue(server.grpc_target, "ui-auth")
    for path in ("/", "/dead", "/enqueue", "/queues/ui-auth", f"/jobs/{job_id}", "/find?q=" + job_id,
                 "/ui/partials/dashboard"):
        page.goto(server.http_url + path)
        assert re.search(r"/login\?next=", page.url), path
        expect(page.locator("h1")).to_have_text("Log in")
    blocked = page.request.post(f"{server.http_url}/queues/ui-auth/pause", max_redirects=0)
    assert blocked.status == 403
    assert page.request.get(f"{server.http_url}/static/app.css").ok
    page.goto(f"{server.http_url}/queues/ui-auth")
    page.fill("#token", "not-it")
    page.click("form.login button")
    expect(page.locator(".flash-error")).to_contain_text("not the admin token")
    page.fill("#token", "ui-s3cret")
    page.click("form.login button")
    expect(page.locator("h1")).to_contain_text("ui-auth")
    assert page.url.endswith("/queues/ui-auth")
    page.get_by_role("button", name="Log out").click()
    page.goto(server.http_url + "/")
    assert "/login" in page.url
