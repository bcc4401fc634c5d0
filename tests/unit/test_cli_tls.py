"""The CLI's TLS options: every command that talks to a server (it has
``--server``) takes ``--tls-ca --tls-cert --tls-key`` with ``SEPP_TLS_*``; ``sepp serve``
takes the server's ``--tls-cert --tls-key --tls-client-ca``. In-process, no server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from sepp.cli.main import _register, app
from sepp.client.tls import tls_hint

_register()


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf command of a click group by its full name (``queues list``)."""
    found: dict[str, Any] = {}
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found.update(_commands(command, f"{prefix}{name} "))
        else:
            found[f"{prefix}{name}"] = command
    return found


def _options(command: Any) -> dict[str, Any]:
    return {opt: param for param in command.params for opt in getattr(param, "opts", [])}


def test_every_command_with_server_takes_the_three_tls_options_and_their_variables() -> None:
    commands = _commands(typer.main.get_command(app))
    talking = {name: cmd for name, cmd in commands.items() if "--server" in _options(cmd)}
    assert {"info", "enqueue", "queues list", "jobs list", "worker", "bench"} <= set(talking)
    for name, command in talking.items():
        options = _options(command)
        envvars = {flag: getattr(options.get(flag), "envvar", None) for flag in ("--tls-ca", "--tls-cert", "--tls-key")}
        assert envvars == {"--tls-ca": "SEPP_TLS_CA", "--tls-cert": "SEPP_TLS_CERT", "--tls-key": "SEPP_TLS_KEY"}, name
    serve = _options(commands["serve"])
    assert {"--tls-cert", "--tls-key", "--tls-client-ca"} <= set(serve) and "--tls-ca" not in serve


def test_a_missing_tls_file_ends_the_command_with_one_line_before_any_call(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["enqueue", "q", "t", "--server", "127.0.0.1:1",
                                      "--tls-ca", str(tmp_path / "ca.pem")])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: --tls-ca: cannot read {tmp_path / 'ca.pem'}: No such file or directory"


def test_the_tls_hint_names_what_grpc_reports() -> None:
    verify = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
              "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:"
              "CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate: OK")
    assert tls_hint(verify, True) == ("; TLS handshake failed (CERTIFICATE_VERIFY_FAILED: unable to get local "
                                      "issuer certificate)")
    closed = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed"
    assert "client certificate" in tls_hint(closed, True)
    assert "give its CA" in tls_hint(closed, False)
    assert tls_hint("failed to connect to all addresses; last error: Connection refused", True) == ""
