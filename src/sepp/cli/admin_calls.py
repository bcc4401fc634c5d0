"""What the admin commands (``sepp queues``, ``sepp jobs``, ``sepp workers``, ``sepp
periodic``) share: an ``AdminClient`` whose refusals and transport errors end the command
(exit 2 and 3), the table console, pretty JSON and the one-line failure (as JSON with
``--json``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from rich.console import Console

from sepp.cli.flags import FlagValueError
from sepp.cli.shell import (
    EXIT_REFUSED,
    EXIT_TRANSPORT,
    fail,
    fail_auth,
    out_console,
    print_json,
)
from sepp.cli.shell import parse_moment as parse_moment
from sepp.cli.tls import client_tls
from sepp.client.admin import AdminClient, AdminError
from sepp.errors import PermissionDenied, TransportError, Unauthenticated


def admin_out() -> Console:
    """The stdout console of the admin commands (tables keep their width when piped)."""
    return out_console(tables=True)


def print_admin_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout (``--json``)."""
    print_json(obj, pretty=True)


def admin_fail(message: str, as_json: bool, exit_code: int = EXIT_REFUSED, **extra: Any) -> NoReturn:
    """End the command with ``message`` on stderr and ``exit_code`` (2 by default); with
    ``--json`` as ``{"error": message, **extra}``. Raises ``typer.Exit``."""
    fail(message, as_json, exit_code, {"error": message, **extra})


def fail_flag(exc: FlagValueError, as_json: bool) -> NoReturn:
    """A refused flag value: exit 2; ``--json`` adds ``flag``, ``limit`` and ``value``."""
    admin_fail(str(exc), as_json, EXIT_REFUSED, flag=exc.flag, limit=exc.limit, value=exc.value[:200])


@contextmanager
def admin_client(server: str, token: str | None, timeout: float, as_json: bool) -> Iterator[AdminClient]:
    """An ``AdminClient``; server refusals and transport errors become exit codes 2 and 3."""
    client = AdminClient(server, token=token, timeout=timeout, **client_tls())
    try:
        yield client
    except AdminError as exc:
        admin_fail(exc.message, as_json, EXIT_REFUSED, reason=exc.reason, status=exc.code.name, metadata=exc.metadata)
    except (Unauthenticated, PermissionDenied) as exc:  # exit 2, not a transport failure
        fail_auth(exc, as_json, " (SEPP_ADMIN_TOKEN works too)")
    except TransportError as exc:
        admin_fail(f"cannot reach {server}: {exc.message}", as_json, EXIT_TRANSPORT, kind=type(exc).__name__)
    finally:
        client.close()
