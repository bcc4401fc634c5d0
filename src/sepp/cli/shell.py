"""The shell every ``sepp`` command shares: exit codes, the common options,
consoles, JSON output, one-line errors, confirmation, and the time/duration flag parsers.

``sepp.cli.flags`` holds the grammar and bounds of flag *values*; this module
holds how a command talks to the terminal and how it ends. The commands (``admin``,
``producer``, ``worker_cmd``, ``bench``) import from here rather than each building their own.

Exit codes: 0 done; 1 declined at a confirmation; 2 refused (by the server, or
bad input / usage); 3 a transport error (no verdict).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape as markup_escape

from sepp.cli.flags import DURATION_FORMS, FlagValueError, one_line, parse_seconds
from sepp.hard_limits import MAX_HORIZON

EXIT_OK = 0
EXIT_DECLINED = 1
#: Refused by the server, or bad input / usage (nothing was done).
EXIT_REFUSED = 2
EXIT_REJECTED = EXIT_REFUSED
EXIT_USAGE = EXIT_REFUSED
EXIT_TRANSPORT = 3

#: ``--server`` default when ``SEPP_SERVER`` is not set.
DEFAULT_SERVER = "127.0.0.1:7700"

ServerOpt = Annotated[str, typer.Option("--server", "-s", envvar="SEPP_SERVER",
                                        help="gRPC target of the sepp server: HOST:PORT, or for several nodes "
                                             "ipv4:HOST:PORT,HOST:PORT,… or dns:///NAME:PORT (docs/deploying.md).")]
#: ``--token`` of the admin commands: a token with role admin; ``SEPP_TOKEN``, and
#: the older ``SEPP_ADMIN_TOKEN`` when that is not set.
TokenOpt = Annotated[str | None, typer.Option("--token", envvar=["SEPP_TOKEN", "SEPP_ADMIN_TOKEN"],
                                              show_default=False,
                                              help="Token with role admin, when the server has tokens "
                                                   "(env SEPP_TOKEN, else SEPP_ADMIN_TOKEN).")]
#: ``--token`` of the commands that produce or work: ``SEPP_TOKEN``.
ClientTokenOpt = Annotated[str | None, typer.Option("--token", envvar="SEPP_TOKEN", show_default=False,
                                                    help="Token secret, when the server has tokens "
                                                         "(role produce to enqueue, work to run a worker).")]
#: What a refused token's error line ends with.
TOKEN_HINT = "check --token / SEPP_TOKEN"
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
#: ``--timeout`` of the admin commands: how long one call may wait for the server, seconds.
WaitTimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds to wait for the server.")]
#: ``--timeout`` of the producer commands: the deadline of each call attempt, seconds.
AttemptTimeoutOpt = Annotated[float, typer.Option("--timeout", help="Deadline per call attempt, seconds.")]


# ---------------------------------------------------------------------- terminal output


_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape(text: str) -> str:
    """Make user-supplied text safe for the terminal: control characters (escape sequences
    that set titles, clear screens, recolour) and bidi overrides become visible ``\\xNN`` /
    ``\\uNNNN`` escapes, and rich markup is escaped."""
    cleaned = _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return markup_escape(cleaned)


def out_console(*, tables: bool = False) -> Console:
    """The stdout console. ``tables``: laid out for at least 160 columns when piped (rich
    assumes 80) or on a narrow terminal, lines left to run (tables of job ids, states and
    reasons need room); else soft-wrapped text."""
    if not tables:
        return Console(highlight=False, soft_wrap=True)
    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal or console.width < 160:
        console = Console(highlight=False, soft_wrap=False, width=max(160, console.width))
    return console


def err_console() -> Console:
    """The stderr console. soft_wrap: an error is one line whatever the terminal width
    (an error is never cut); rich would otherwise break it at 80 columns when stderr is not a terminal."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(obj: Any, *, pretty: bool = False, stderr: bool = False) -> None:
    """One JSON document and a newline on stdout (or stderr); non-ASCII kept as is;
    ``pretty`` indents by 2."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(json.dumps(obj, indent=2 if pretty else None, ensure_ascii=False) + "\n")
    stream.flush()


def fail(message: str, as_json: bool, exit_code: int, doc: dict[str, Any], *,
         clean: Callable[[str], str] = escape) -> NoReturn:
    """End the command with ``exit_code``: ``doc`` as JSON on stderr with ``--json``, else
    ``error: <message>`` on one stderr line (``message`` passed through ``clean``, the
    terminal-safe ``escape`` unless told otherwise)."""
    if as_json:
        print_json(doc, stderr=True)
    else:
        err_console().print(f"[bold red]error:[/] {clean(one_line(message))}")
    raise typer.Exit(exit_code)


def confirm(question: str, yes: bool, as_json: bool) -> None:
    """Ask before a destructive action (exit 1 when declined); refuse (exit 2) without a
    terminal unless ``--yes`` was given."""
    if yes:
        return
    if not sys.stdin.isatty():
        message = f"{question} — refusing without --yes (no terminal to ask)"
        fail(message, as_json, EXIT_REFUSED, {"error": message})
    if not typer.confirm(question, default=False, err=True):
        err_console().print("Nothing done.")
        raise typer.Exit(EXIT_DECLINED)


def fail_auth(exc: Exception, as_json: bool, also: str = "") -> NoReturn:
    """End a command whose token the server refused (``Unauthenticated`` / ``PermissionDenied``)
    : exit 2 (fix the invocation; retrying cannot help) with the server's message,
    ``TOKEN_HINT`` when it has none, and ``also`` (e.g. the admin commands' older variable)."""
    message = str(exc)
    if "--token" not in message:
        message += f"; {TOKEN_HINT}"
    message += also
    code = getattr(exc, "code", None)
    fail(message, as_json, EXIT_REFUSED, {"error": message, "kind": type(exc).__name__,
                                          "status": getattr(code, "name", ""), "reason": getattr(exc, "reason", "")})


# ---------------------------------------------------------------------- times and durations


def parse_duration(text: str, flag: str = "--in", hi: float = MAX_HORIZON) -> dt.timedelta:
    """A delay flag (``--in``): ``30s``, ``10m``, ``2h``, ``1d``, ``250ms``, combined ``1h30m``,
    bare seconds (``45``, ``1e3``) or ``1e3s`` (grammar: ``sepp.cli.flags``) → a timedelta.

    Raises ``FlagValueError`` (a ``ValueError``) naming ``flag`` and the value for anything
    else, a negative delay, and one beyond ``hi`` seconds (default ``MAX_HORIZON``, 10 years:
    the longest ``max_schedule_horizon`` a server may have, so no server could accept it).
    Flags that want plain seconds (queue settings) use ``flags.parse_seconds``.
    """
    return dt.timedelta(seconds=parse_seconds(flag, text, 0.0, hi))


def parse_when(text: str) -> dt.datetime:
    """Parse ``--at`` / ``scheduled_at``: ISO 8601 with a zone (``Z`` or ``+01:00``).

    Raises ``ValueError`` when unparsable or when the zone is missing.
    """
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 date-time") from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; add Z or an offset such as +01:00")
    return when


def parse_moment(text: str, flag: str = "time") -> dt.datetime:
    """An RFC 3339 time (naive = UTC) or a duration meaning "that long ago" → aware datetime (UTC).

    Raises ``FlagValueError`` naming ``flag`` for anything else, and for a moment outside
    0001-01-01 .. 9999-12-31 UTC (e.g. ``0001-01-01T00:00:00+14:00``, ``--after 315576000000s``).
    """
    stripped = text.strip()
    try:
        moment = dt.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        try:
            ago = parse_seconds(flag, text)
        except FlagValueError as exc:
            if exc.problem.startswith("not a duration"):
                raise FlagValueError(flag, text, f"not an RFC 3339 time (2030-01-01T09:00:00Z) nor a "
                                                 f"duration ago: {DURATION_FORMS}") from None
            raise
        try:
            return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=ago)
        except OverflowError:
            raise FlagValueError(flag, text, "that long ago is before 0001-01-01T00:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    try:
        return moment.astimezone(dt.UTC)
    except OverflowError:
        raise FlagValueError(flag, text, "outside 0001-01-01 .. 9999-12-31 UTC") from None
