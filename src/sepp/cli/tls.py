"""``--tls-ca --tls-cert --tls-key`` on every command that talks to a server.

The three flags (env ``SEPP_TLS_CA``, ``SEPP_TLS_CERT``, ``SEPP_TLS_KEY``) are added by
``add_tls_options(app)`` to every command with a ``--server`` option (``sepp info``,
``enqueue``, ``queues …``, ``jobs …``, ``worker``, ``bench``…) rather than being repeated
in each signature: the wrapper takes them off the call, keeps them for the command's
duration (``client_tls()``), and the places that build a ``Client``, ``AsyncClient``,
``AdminClient`` or ``Worker`` pass ``**client_tls()`` on. A TLS file that cannot be read or
used ends the command with one ``error:`` line and exit 2 (bad input), before any call.

The same wrapper checks ``--server`` (``sepp.client.target.normalize_target``): a
``grpc://`` or ``http://`` prefix is removed, ``grpcs://`` / ``https://`` is accepted with
TLS files only, and a value with a URL path or a prefixed one without a port ends the
command with one ``error: --server …`` line naming ``HOST:PORT``, exit 2.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict, cast

import typer

from sepp.cli.flags import one_line


class TlsFiles(TypedDict, total=False):
    """The TLS keyword arguments of the clients and the worker (``sepp.client.tls``)."""

    tls_ca: Path
    tls_cert: Path
    tls_key: Path


#: The TLS files of the command running now (``client_tls``).
_CURRENT: contextvars.ContextVar[TlsFiles] = contextvars.ContextVar("sepp_cli_tls", default=TlsFiles())  # noqa: B039

#: The options added to each command: parameter name → (type with its typer option).
_OPTIONS: dict[str, Any] = {
    "tls_ca": Annotated[Path | None, typer.Option(
        "--tls-ca", envvar="SEPP_TLS_CA", show_default=False, rich_help_panel="TLS",
        help="PEM CA bundle the server's certificate must chain to: talk TLS.")],
    "tls_cert": Annotated[Path | None, typer.Option(
        "--tls-cert", envvar="SEPP_TLS_CERT", show_default=False, rich_help_panel="TLS",
        help="PEM client certificate, for a server that requires one (mutual TLS; with --tls-key).")],
    "tls_key": Annotated[Path | None, typer.Option(
        "--tls-key", envvar="SEPP_TLS_KEY", show_default=False, rich_help_panel="TLS",
        help="PEM private key of --tls-cert.")],
}
_MARK = "__sepp_tls_options__"


def client_tls() -> TlsFiles:
    """The ``tls_ca`` / ``tls_cert`` / ``tls_key`` keyword arguments of the running command
    (only those given), for ``Client(…, **client_tls())`` and the like."""
    return TlsFiles(**_CURRENT.get())


def _check(files: TlsFiles) -> None:
    """End the command (exit 2, one line) when the files cannot be used."""
    from sepp.client.tls import read_tls_files

    try:
        read_tls_files(files.get("tls_ca"), files.get("tls_cert"), files.get("tls_key"))
    except ValueError as exc:
        message = one_line(exc)
        for name in _OPTIONS:  # "tls_ca: cannot read …" → "--tls-ca: cannot read …"
            if message.startswith(name):
                message = "--" + name.replace("_", "-") + message[len(name):]
                break
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(2) from None


def _server(server: str, *, tls: bool) -> str:
    """``--server`` as the clients dial it (``normalize_target``); a value that is not
    ``HOST:PORT`` ends the command (exit 2, one line)."""
    from sepp.client.target import normalize_target

    try:
        return normalize_target(server, tls=tls)
    except ValueError as exc:
        typer.echo(f"error: --server {one_line(exc)}", err=True)
        raise typer.Exit(2) from None


def with_tls_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with the three TLS options added to its signature (for typer); the call runs
    with them in ``client_tls()`` and its ``server`` normalized (``_server``). Applied once
    (a wrapped command is returned as is)."""
    if getattr(fn, _MARK, False):
        return fn
    signature = inspect.signature(fn, eval_str=True)
    params = [p for p in signature.parameters.values() if p.name not in _OPTIONS]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
               for name, annotation in _OPTIONS.items()]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        files = cast(TlsFiles, {name: path for name in _OPTIONS if (path := kwargs.pop(name, None)) is not None})
        if files:
            _check(files)
        if isinstance(kwargs.get("server"), str):
            kwargs["server"] = _server(kwargs["server"], tls=bool(files))
        token = _CURRENT.set(files)
        try:
            return fn(*args, **kwargs)
        finally:
            _CURRENT.reset(token)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must read the new signature, not the original's
    setattr(wrapper, _MARK, True)
    return wrapper


def _talks_to_server(fn: Callable[..., Any]) -> bool:
    return "server" in inspect.signature(fn).parameters


def add_tls_options(app: typer.Typer) -> None:
    """Add the TLS options to every command of ``app`` and its groups that has a ``server``
    parameter (``--server``). Idempotent; call before the CLI runs."""
    for command in app.registered_commands:
        if command.callback is not None and _talks_to_server(command.callback):
            command.callback = with_tls_options(command.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            add_tls_options(group.typer_instance)


__all__ = ["TlsFiles", "add_tls_options", "client_tls", "with_tls_options"]
