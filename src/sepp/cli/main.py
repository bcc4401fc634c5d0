"""Entry point of the ``sepp`` command: one typer app, one module per command group.

Flags and ``SEPP_*`` environment variables are read here, at the edge, and turned
into explicit config objects; nothing below the CLI reads the environment.
"""

from __future__ import annotations

import json
import platform
from typing import Annotated

import typer

from sepp._version import __version__

app = typer.Typer(
    name="sepp",
    help="sepp — a durable job-queue server. Human output by default, --json for scripts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"sepp {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_show_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """sepp — a durable job-queue server."""


@app.command("version")
def version_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
) -> None:
    """Print this installation's version (no server needed; `sepp info` asks a server for its own)."""
    if as_json:
        typer.echo(json.dumps({"version": __version__, "python": platform.python_version()}))
    else:
        typer.echo(f"sepp {__version__} (Python {platform.python_version()})")


#: The module that adds each top-level command or group to ``app``. ``sepp <command>``
#: imports only its own (``sepp worker`` then starts without the server's configuration,
#: the admin views and pydantic-settings: about half a second less on a loaded 2-core
#: machine, before a worker's first Reserve); ``sepp``, ``sepp --help`` and anything not
#: listed import them all. tests/unit/test_cli_help.py checks the map against the app.
COMMAND_MODULES: dict[str, str] = {
    "serve": "serve", "migrate": "serve", "enqueue": "producer", "info": "producer", "worker": "worker_cmd",
    "bench": "bench", "queues": "queues_cmd", "jobs": "jobs_cmd", "workers": "workers_cmd", "periodic": "periodic_cmd",
    "token": "token_cmd", "workflows": "workflows_cmd",
}
_ALL = ("serve", "producer", "worker_cmd", "queues_cmd", "jobs_cmd", "workers_cmd", "periodic_cmd", "bench",
        "token_cmd", "workflows_cmd")


def _register(command: str = "") -> None:
    """Import the command modules (each adds its commands to ``app``): only ``command``'s
    when ``COMMAND_MODULES`` names it, else all of them (the full help)."""
    own = COMMAND_MODULES.get(command)
    for name in (own,) if own else _ALL:
        try:
            __import__(f"sepp.cli.{name}")
        except ModuleNotFoundError as exc:  # a command group not built yet
            if exc.name != f"sepp.cli.{name}":
                raise
    from sepp.cli.tls import add_tls_options

    add_tls_options(app)  # --tls-ca/--tls-cert/--tls-key on every command with --server


def _command(argv: list[str]) -> str:
    """The command ``argv`` (without the program name) names: its first word, if it is not
    an option (``sepp --version`` names none)."""
    return argv[0] if argv and not argv[0].startswith("-") else ""


def _quiet_grpc(argv: list[str]) -> None:
    """Every command but ``sepp serve`` talks to a server as a client: set gRPC's C core to
    log errors only (``GRPC_VERBOSITY=ERROR``) unless the environment says otherwise, before
    grpc is imported. Otherwise a TLS failure prints one C-core line per connection attempt
    (``ssl_transport_security.cc … Handshake failed``, a dozen in a 10 s deadline) above the
    command's own one-line error. ``sepp serve`` keeps gRPC's default: its handshake lines
    tell an operator which client failed (docs/operations.md)."""
    import os

    if _command(argv) != "serve":
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def main() -> None:
    """Run the ``sepp`` CLI (console script entry point)."""
    import sys

    _quiet_grpc(sys.argv[1:])
    _register(_command(sys.argv[1:]))
    app()


if __name__ == "__main__":
    main()
