"""Tokens and roles without a server: the ``[[auth.tokens]]`` config checks, the
authenticator (constant-time lookup, failure counts, rate-limited log lines), the loopback
rule of ``sepp serve``, the client's error classes and that they are never retried, and the
one-line refusals of ``sepp token new`` and ``sepp serve`` (in-process: they exit before
anything is started)."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner

from sepp import wire
from sepp.cli.main import _register, app
from sepp.client import ClientOptions
from sepp.client._core import error_from_status, retry_delay
from sepp.errors import AdminError, PermissionDenied, TransportError, Unauthenticated
from sepp.server.auth import (
    Authenticator,
    TokenEntry,
    bearer,
    digest,
    exposed_listeners,
    is_loopback,
    malformed_authorization,
    toml_entry,
)
from sepp.server.config import ConfigError, ServerConfig, load_config

runner = CliRunner()
_register()
SHA = digest("s3cret")


def config_with(tmp_path: Path, toml: str) -> ServerConfig:
    path = tmp_path / "c.toml"
    path.write_text(toml, "utf-8")
    return load_config(path)


def test_a_pasted_entry_loads_and_auth_is_on(tmp_path: Path) -> None:
    cfg = config_with(tmp_path, toml_entry("billing", SHA.upper(), ["work", "produce"]))
    (entry,) = cfg.auth.tokens
    assert (entry.name, entry.sha256, entry.roles) == ("billing", SHA, ("produce", "work"))  # ROLES order
    assert Authenticator.from_config(cfg.auth, None).on
    assert not Authenticator.from_config(load_config(None).auth, None).on


@pytest.mark.parametrize(("entry", "key", "says"), [
    ('name = "a"\nsha256 = "xyz"\nroles = ["admin"]', "auth.tokens.0.sha256", "64 hex digits"),
    (f'name = "a"\nsha256 = "{SHA[:-1]}"\nroles = ["admin"]', "auth.tokens.0.sha256", "64 hex digits"),
    (f'name = "a"\nsha256 = "{SHA}0"\nroles = ["admin"]', "auth.tokens.0.sha256", "64 hex digits"),
    (f'name = "a"\nsha256 = "{"g" * 64}"\nroles = ["admin"]', "auth.tokens.0.sha256", "64 hex digits"),
    (f'name = "a"\nsha256 = "{SHA}"\nroles = ["root"]', "auth.tokens.0.roles", "unknown role 'root'"),
    (f'name = "a"\nsha256 = "{SHA}"\nroles = []', "auth.tokens.0.roles", "at least one role"),
    (f'name = "a"\nsha256 = "{SHA}"\nroles = "admin"', "auth.tokens.0.roles", "a list of roles"),
    (f'name = "a b"\nsha256 = "{SHA}"\nroles = ["admin"]', "auth.tokens.0.name", "token name"),
    (f'name = "a"\nsha256 = "{SHA}"\nroles = ["admin"]\nsecret = "x"', "auth.tokens.0.secret", "Extra"),
])
def test_a_bad_entry_is_a_one_line_error_naming_the_key(tmp_path: Path, entry: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_with(tmp_path, f"[[auth.tokens]]\n{entry}\n")
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"{key}: ") and says in text


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^auth.tokens: token name 'a' is given twice"):
        config_with(tmp_path, toml_entry("a", SHA, ["admin"]) + toml_entry("a", digest("x"), ["work"]))


def test_the_authenticator_finds_tokens_by_digest_and_admin_token_is_an_admin() -> None:
    auth = Authenticator([TokenEntry(name="p", sha256=SHA, roles=("produce",))], admin_token="legacy")
    assert auth.enforced == {"produce", "work", "admin"}
    token = auth.identify("s3cret")
    assert token is not None and token.name == "p" and token.sha256 == hashlib.sha256(b"s3cret").digest()
    assert auth.identify("s3cret ") is None and auth.identify("") is None and auth.identify(None) is None
    legacy = auth.identify("legacy")
    assert legacy is not None and (legacy.name, legacy.roles) == ("admin_token", frozenset({"admin"}))
    assert auth.by_marker("admin_token", legacy.marker) is legacy and auth.by_marker("p", token.marker) is None
    alone = Authenticator(admin_token="legacy")  # the behaviour before roles: only admin is checked
    assert alone.enforced == {"admin"} and not alone.required("produce") and alone.required("admin")


def test_the_ui_session_key_needs_a_secret_and_changes_with_the_tokens() -> None:
    entry = TokenEntry(name="boss", sha256=SHA, roles=("admin",))
    bare = Authenticator([entry])  # digests only: anyone reading the config could sign with them
    assert bare.session_key() != bare.session_key()  # so: random (per process, asked once)
    keyed = Authenticator([entry], session_secret="k" * 32)
    assert keyed.session_key() == Authenticator([entry], session_secret="k" * 32).session_key()
    assert keyed.session_key() != Authenticator([entry], session_secret="j" * 32).session_key()
    changed = TokenEntry(name="boss", sha256=digest("other"), roles=("admin",))
    assert keyed.session_key() != Authenticator([changed], session_secret="k" * 32).session_key()
    legacy = Authenticator(admin_token="legacy")
    assert legacy.session_key() == Authenticator(admin_token="legacy").session_key()


def test_a_short_session_secret_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^auth.session_secret: .*at least 32 characters"):
        config_with(tmp_path, '[auth]\nsession_secret = "short"\n')


def test_failures_are_counted_always_and_logged_at_most_once_a_second_per_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    auth = Authenticator(admin_token="x", clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="sepp.auth"):
        for _ in range(5):
            auth.failed("unknown", "an unknown token")
        auth.failed("missing", "no token")
        now[0] += 0.999
        auth.failed("unknown", "an unknown token")
        now[0] += 0.001
        auth.failed("unknown", "an unknown token")
    assert auth.failures == {"missing": 1, "unknown": 7, "forbidden": 0}
    lines = [r.getMessage() for r in caplog.records if r.name == "sepp.auth"]
    assert lines == ["auth failure (unknown): an unknown token", "auth failure (missing): no token",
                     "auth failure (unknown): an unknown token (5 more unknown failures not logged)"]


@pytest.mark.parametrize(("metadata", "secret"), [
    ((("authorization", "Bearer abc"),), "abc"), ((("authorization", "bearer  abc "),), "abc"),
    ((("authorization", b"Bearer abc"),), "abc"), ((("authorization", "Basic abc"),), None),
    ((("authorization", "Bearer"),), None), ((("x-other", "Bearer abc"),), None), (None, None),
])
def test_bearer_reads_the_authorization_metadata(metadata: Any, secret: str | None) -> None:
    assert bearer(metadata) == secret


@pytest.mark.parametrize(("value", "problem"), [
    ("s3cret", "without the 'Bearer ' prefix"), (b"s3cret", "without the 'Bearer ' prefix"),
    ("Basic czNjcmV0", "another scheme than 'Bearer'"), ("Bearer", "'Bearer' and no token after it"),
    ("Bearer   ", "'Bearer' and no token after it"), ("", "an empty authorization header"),
    ("Bearer s3cret", None), ("bearer s3cret", None),
])
def test_an_authorization_entry_that_is_not_bearer_token_is_told_apart(value: str | bytes,
                                                                       problem: str | None) -> None:
    said = malformed_authorization((("x-other", "v"), ("authorization", value)))
    assert said is None if problem is None else (said is not None and problem in said)
    assert said is None or "s3cret" not in said  # the value may be a secret: never repeated
    assert malformed_authorization(None) is None and malformed_authorization((("x-other", "s3cret"),)) is None


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("localhost", True), ("LOCALHOST", True), ("::1", True),
    ("[::1]", True), ("0.0.0.0", False), ("::", False), ("[::]", False), ("10.0.0.1", False),
    ("128.0.0.1", False), ("example.com", False), ("localhost.example.com", False),
])
def test_loopback_is_127_0_0_0_8_and_the_ipv6_loopback_and_localhost(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert exposed_listeners({"grpc_listen": f"{host}:7700", "http_listen": ""}) == (
        [] if loopback else [f"grpc_listen {host}:7700"])


def _trailing(code: grpc.StatusCode, reason: str) -> list[tuple[str, str | bytes]]:
    status = wire.plain_status(code.value[0], reason, "the server's words; check --token / SEPP_TOKEN / token=")
    return [(wire.STATUS_DETAILS_KEY, status.SerializeToString())]


@pytest.mark.parametrize(("code", "cls"), [(grpc.StatusCode.UNAUTHENTICATED, Unauthenticated),
                                           (grpc.StatusCode.PERMISSION_DENIED, PermissionDenied)])
@pytest.mark.parametrize("admin", [False, True])
def test_auth_statuses_are_the_transport_family_and_never_retried(code: grpc.StatusCode, cls: type[Exception],
                                                                  admin: bool) -> None:
    error = error_from_status(code, "d", _trailing(code, code.name), admin=admin)
    assert type(error) is cls and isinstance(error, TransportError) and not isinstance(error, AdminError)
    assert error.message == "the server's words; check --token / SEPP_TOKEN / token="  # the hint once
    assert retry_delay(error, 1, ClientOptions(), idempotent=True) is None
    bare = error_from_status(code, "", None)  # no details at all: still the class, with the hint
    assert type(bare) is cls and "SEPP_TOKEN" in bare.message


@pytest.mark.parametrize(("args", "says"), [
    (["bad name", "--role", "admin"], "token name 'bad name'"), (["ok", "--role", "root"], "unknown role 'root'"),
    (["ok"], "--role needs at least one role"), (["x" * 65, "-r", "work"], "token name"),
])
def test_token_new_refuses_a_bad_name_or_role_in_one_line(args: list[str], says: str) -> None:
    result = runner.invoke(app, ["token", "new", *args])
    assert result.exit_code == 2 and result.stdout == ""
    assert says in result.stderr and result.stderr.count("\n") == 1


def test_token_new_prints_a_fresh_secret_and_its_digest() -> None:
    import json

    docs = [json.loads(runner.invoke(app, ["token", "new", "n", "-r", "admin", "--json"]).stdout) for _ in range(2)]
    assert docs[0]["secret"] != docs[1]["secret"]
    assert all(d["sha256"] == digest(d["secret"]) and d["secret"] not in d["toml"] for d in docs)


@pytest.mark.timeout(60)  # a refusal that did not happen would start a server here
@pytest.mark.parametrize("listen", [["--grpc-listen", "0.0.0.0:0"], ["--http-listen", "0.0.0.0:0"],
                                    ["--grpc-listen", "[::]:0"], ["--http-listen", "myhost.example:0"]])
def test_serve_refuses_a_non_loopback_listener_without_tokens(tmp_path: Path, listen: list[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in __import__("os").environ if n.upper().startswith("SEPP_")]:
        monkeypatch.delenv(name)
    path = tmp_path / "c.toml"
    path.write_text('admin_token = "only-admin"\n', "utf-8")  # admin_token alone leaves producers open
    result = runner.invoke(app, ["serve", "--config", str(path), "--data-dir", str(tmp_path / "d"), *listen])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("sepp: refusing to listen on ")
    assert listen[1] in result.stderr and "--insecure" in result.stderr and "sepp token new" in result.stderr
