"""The web UI with tokens: it logs in with any token that has role ``admin`` and
keeps a signed session cookie naming the token; a token without ``admin`` or an unknown one
is refused; logging out logs out; a changed token logs its sessions out; ``/healthz`` and
``/metrics`` stay open. httpx against the HTTP port (the browser tests cover the pages).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.auth import TOKENS, auth_config
from support.servers import ServerFactory, module_server

from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason=(
    "backend-neutral: the UI's login and sessions are front-end code, the same on both "
    "backends"))


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, **auth_config())


def csrf(web: httpx.Client, path: str = "/login") -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', web.get(path).text)
    assert match
    return match[1]


def login(web: httpx.Client, secret: str) -> httpx.Response:
    return web.post("/login", data={"csrf_token": csrf(web), "token": secret, "next": "/dead"})


@pytest.mark.parametrize("token", ["admin", "ops"])
def test_a_token_with_role_admin_logs_in_and_the_session_survives(locked: ServerProcess, token: str) -> None:
    with httpx.Client(base_url=locked.http_url) as web:
        assert web.get("/").status_code == 303  # to the login page
        answer = login(web, TOKENS[token][0])
        assert answer.status_code == 303 and answer.headers["location"] == "/dead"
        assert web.get("/").status_code == 200 and web.get("/dead").status_code == 200
        cookie = web.cookies["sepp_session"]
        assert TOKENS[token][0] not in cookie  # the cookie names the token, never holds its secret
        with httpx.Client(base_url=locked.http_url, cookies={"sepp_session": cookie}) as again:
            assert again.get("/").status_code == 200  # a new connection with the cookie: still logged in
        logout = web.post("/logout", data={"csrf_token": csrf(web, "/")})
        assert logout.status_code == 303 and logout.headers["location"] == "/login"
        assert web.get("/").status_code == 303 and "sepp_session" not in web.cookies


@pytest.mark.parametrize(("secret", "status", "says"), [
    (TOKENS["producer"][0], 403, "does not have role 'admin'"),
    (TOKENS["worker"][0], 403, "does not have role 'admin'"),
    ("not-a-token", 401, "not the admin token"),
    ("", 401, "not the admin token"),
])
def test_a_token_without_admin_or_an_unknown_one_is_refused(locked: ServerProcess, secret: str, status: int,
                                                            says: str) -> None:
    with httpx.Client(base_url=locked.http_url) as web:
        answer = login(web, secret)
        assert answer.status_code == status and says in html.unescape(answer.text)
        assert web.get("/").status_code == 303  # still not logged in
        assert web.get("/healthz").status_code == 200 and web.get("/metrics").status_code == 200


def test_a_forged_or_tampered_session_is_not_logged_in(locked: ServerProcess) -> None:
    with httpx.Client(base_url=locked.http_url) as web:
        login(web, TOKENS["admin"][0])
        cookie = web.cookies["sepp_session"]
    forged = cookie[:-4] + ("AAAA" if not cookie.endswith("AAAA") else "BBBB")
    with httpx.Client(base_url=locked.http_url, cookies={"sepp_session": forged}) as web:
        assert web.get("/").status_code == 303


def test_a_restart_keeps_sessions_and_a_changed_token_logs_them_out(server_factory: ServerFactory) -> None:
    tokens = {"boss": ("first-secret", ["admin"]), "other": ("other-secret", ["produce"])}
    key = {"session_secret": "k" * 32}  # the same on every node and every start

    def config(tokens: dict[str, tuple[str, list[str]]]) -> dict[str, Any]:
        return {"auth": {**auth_config(tokens)["auth"], **key}}

    server = server_factory(config(tokens))
    with httpx.Client(base_url=server.http_url) as web:
        assert login(web, "first-secret").status_code == 303
        cookie = web.cookies["sepp_session"]
    server.restart()  # same tokens and session_secret: the same session key
    with httpx.Client(base_url=server.http_url, cookies={"sepp_session": cookie}) as web:
        assert web.get("/").status_code == 200
    server.restart(**config({**tokens, "boss": ("new-secret", ["admin"])}))
    with httpx.Client(base_url=server.http_url, cookies={"sepp_session": cookie}) as web:
        assert web.get("/").status_code == 303  # the token changed: logged out
        assert login(web, "first-secret").status_code == 401
        assert login(web, "new-secret").status_code == 303


def test_without_tokens_the_ui_stays_open(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.http_url) as web:
        assert web.get("/").status_code == 200 and web.get("/login").status_code == 303
