"""How the producer commands (``sepp enqueue``, ``sepp info``) report: a rejection and an
ack as JSON objects, the one-line failures that end a command (bad input: exit 2, a
rejection: exit 2, a transport error: exit 3; as JSON with ``--json``), and the sync
``Client`` they talk through."""

from __future__ import annotations

from typing import Any, NoReturn

import typer
from rich.markup import escape

from sepp.cli.shell import (
    EXIT_REJECTED,
    EXIT_TRANSPORT,
    err_console,
    fail,
    fail_auth,
    print_json,
)
from sepp.cli.tls import client_tls
from sepp.request import EnqueueAck, Rejection


def rejection_json(rejection: Rejection) -> dict[str, Any]:
    """A rejection as a JSON object (code, message, field, limit, actual)."""
    return {"code": rejection.code.value, "message": rejection.message, "field": rejection.field,
            "limit": rejection.limit, "actual": rejection.actual}


def ack_json(ack: EnqueueAck) -> dict[str, Any]:
    """An ack as a JSON object."""
    return {"job_id": ack.job_id, "deduplicated": ack.deduplicated}


def fail_input(message: str, as_json: bool) -> NoReturn:
    """End the command on bad input: exit 2, ``message`` on stderr (``{"error": "invalid_input",
    …}`` with ``--json``). Raises ``typer.Exit``."""
    fail(message, as_json, EXIT_REJECTED, {"error": "invalid_input", "message": message}, clean=escape)


def fail_rejected(rejection: Rejection, as_json: bool, what: str = "rejected") -> NoReturn:
    """End the command on a rejection: exit 2, the rejection on stderr (``print_rejection``,
    or its JSON object with ``--json``). Raises ``typer.Exit``."""
    if as_json:
        print_json({"error": "rejected", **rejection_json(rejection)}, stderr=True)
    else:
        print_rejection(rejection, what)
    raise typer.Exit(EXIT_REJECTED)


def print_rejection(rejection: Rejection, what: str) -> None:
    """Print ``what: CODE — message`` and the rejection's field, limit and actual value on stderr."""
    err = err_console()
    err.print(f"[bold red]{escape(what)}:[/] [bold]{rejection.code.value}[/] — {escape(rejection.message)}",
              markup=True)
    for name in ("field", "limit", "actual"):
        value = getattr(rejection, name)
        if value not in (None, ""):
            err.print(f"  {name}: {value}", markup=False)


def fail_transport(exc: Exception, server: str, as_json: bool, extra: dict[str, Any] | None = None) -> NoReturn:
    """End the command on a transport error: exit 3 (2 for a refused token), the error on
    stderr — an ``enqueue_many`` error by its failed call's own message (``call_message``: the
    caller reports the lines) — as JSON with ``--json``, ``extra`` keys added."""
    from sepp.errors import Overloaded, PermissionDenied, TransportError, Unauthenticated

    if isinstance(exc, Unauthenticated | PermissionDenied):  # exit 2, fix the token
        fail_auth(exc, as_json)

    kind = type(exc).__name__
    message = (exc.call_message if isinstance(exc, TransportError) else None) or str(exc)
    if as_json:
        more = {"retry_after": exc.retry_after} if isinstance(exc, Overloaded) else {}
        print_json({"error": "transport", "kind": kind, "server": server, "message": message, **more,
                    **(extra or {})}, stderr=True)
    else:
        err_console().print(f"[bold red]transport error ({kind}) talking to {escape(server)}:[/] {escape(message)}",
                     markup=True)
    raise typer.Exit(EXIT_TRANSPORT)


def open_client(server: str, timeout: float, validate_locally: bool = True, token: str | None = None) -> Any:
    """A sync ``Client`` of ``server`` with the call ``timeout`` (seconds), local validation
    on or off, the token and the CLI's TLS files; imported on use (``sepp.client`` is not light)."""
    from sepp.client import Client, ClientOptions

    return Client(server, options=ClientOptions(timeout=timeout, validate_locally=validate_locally),
                  token=token or "", **client_tls())
