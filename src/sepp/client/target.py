"""The server address every client takes, and what a client does on its first contact.

Shared by ``Client``, ``AsyncClient``, ``AdminClient``, the ``Worker`` and the CLI's
``--server`` (README "Produce a job from Python", docs/decisions.md "A first contact fails
fast"). A client given no target takes ``$SEPP_SERVER``, else ``127.0.0.1:7700``
(``given_target``).

**The address.** A target is ``HOST:PORT`` (or one of gRPC's own forms:
``ipv4:HOST:PORT,HOST:PORT``, ``dns:///NAME:PORT``, ``unix:PATH``; passed on as they are).
A URL-style prefix is accepted and removed (``normalize_target``): ``grpc://`` and
``http://`` name plaintext gRPC; ``grpcs://`` and ``https://`` name TLS, so they are accepted
only when TLS is configured (``tls_ca`` / ``tls_cert``, ``--tls-ca``,
``ClientOptions.credentials``) — TLS is never switched on by a prefix alone. Anything after ``HOST:PORT``
but one ``/``, or a prefixed target without a port, is a ``ValueError`` naming ``HOST:PORT``.

**The first contact.** A process remembers each address where one of its calls reached a
server (any answer but "no connection"; ``mark_reached``). A call to an address it never
reached, which finds that nothing there can be connected to — the connection was refused,
the host name does not exist, what answered speaks HTTP/1.x (sepp's HTTP port), the TLS
handshake failed — fails at once (``first_contact_error``): ``Unavailable`` with ``not_sent``
true and the cause in words, e.g. ``connection refused: is sepp running on
127.0.0.1:7799?``. A call to an address reached before waits for the connection within its
deadline instead (a restarting server; ``ClientOptions.wait_for_ready``). A failure that
says nothing definite (a connection that times out, a DNS server that does not answer) is
waited out as before.
"""

from __future__ import annotations

import os

import grpc

from sepp.client.tls import tls_hint
from sepp.errors import DeadlineExceeded, SeppError, Unavailable

#: URL schemes a target may start with (``scheme://HOST:PORT``) → whether the scheme means TLS.
URL_SCHEMES: dict[str, bool] = {"grpc": False, "http": False, "grpcs": True, "https": True}

#: The port ``sepp serve`` listens on for gRPC unless told otherwise (``grpc_listen``).
DEFAULT_GRPC_PORT = 7700
#: Where a client connects when given no target and ``SEPP_SERVER`` is unset (or empty).
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_GRPC_PORT}"
#: The environment variable naming the server when a client is given no target (as for
#: every ``sepp`` command's ``--server`` and ``sepp.App``).
TARGET_ENV = "SEPP_SERVER"


def given_target(target: str | None) -> str:
    """The target a client takes: ``target`` when given (an explicit one always wins), else
    ``$SEPP_SERVER`` when set and not empty, else ``DEFAULT_TARGET`` (``127.0.0.1:7700``).
    The variable is read when the client is made. Not yet normalized (``normalize_target``)."""
    if target is not None:
        return target
    return os.environ.get(TARGET_ENV) or DEFAULT_TARGET


def normalize_target(target: str, *, tls: bool) -> str:
    """``target`` without a ``grpc://``, ``http://``, ``grpcs://`` or ``https://`` prefix (and
    a trailing ``/``), else ``target`` unchanged (``HOST:PORT`` and gRPC's own forms).

    ``tls``: whether the client is configured for TLS. Raises ``ValueError`` (one line naming
    the expected form ``HOST:PORT``) for a bare port (``"7700"``: it suggests
    ``127.0.0.1:7700``), a prefixed target with a path or without a port, and for
    ``grpcs://`` / ``https://`` when ``tls`` is false.
    """
    if target.isdigit():  # a bare port: gRPC would take it for a host name and dial port 443
        raise ValueError(f"{target!r} names no host: expected HOST:PORT, e.g. 127.0.0.1:{target}")
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() not in URL_SCHEMES:
        return target
    address = rest[:-1] if rest.endswith("/") else rest
    expected = f"expected HOST:PORT, e.g. 127.0.0.1:{DEFAULT_GRPC_PORT}"
    if not address or "/" in address or "?" in address or "#" in address:
        raise ValueError(f"{target!r} is not a server address: {expected} (a gRPC server has no URL path)")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or host.endswith(":"):
        raise ValueError(f"{target!r} names no port: {expected} (sepp's gRPC port is {DEFAULT_GRPC_PORT} "
                         f"by default)")
    if URL_SCHEMES[scheme.lower()] and not tls:
        raise ValueError(f"{target!r} asks for TLS ({scheme}://) and none is configured: give the server's CA "
                         f"(tls_ca=, --tls-ca) to talk TLS, or write {address} for plaintext gRPC")
    return address


# ----------------------------------------------------------------- the first contact

#: Addresses a call of this process reached a server at (``mark_reached``). Bounded: past
#: ``_REACHED_MAX`` distinct addresses no more are remembered (they keep failing fast).
_REACHED: set[str] = set()
_REACHED_MAX = 4096


def mark_reached(target: str) -> None:
    """Remember that a call to ``target`` got an answer from a server (any but "no
    connection"): later calls from this process, by any client, wait for ``target`` when it
    is down instead of failing fast."""
    if len(_REACHED) < _REACHED_MAX:
        _REACHED.add(target)


def has_reached(target: str) -> bool:
    """Whether a call of this process reached a server at ``target`` (``mark_reached``)."""
    return target in _REACHED


#: What gRPC says when the host name does not exist (not: the DNS server did not answer).
_NO_SUCH_HOST = ("domain name not found", "name or service not known", "nodename nor servname")
#: OS errors of a connect that say the address is wrong, not that the server is slow.
_NO_PATH = ("no route to host", "network is unreachable")


def no_server_cause(details: str, target: str, *, tls: bool) -> str | None:
    """The cause, in words, when these ``UNAVAILABLE`` status details show that nothing at
    ``target`` can be connected to — connection refused, no such host, a malformed address,
    an HTTP/1.x answer, no route, a failed TLS handshake or a connection closed at once —
    else ``None`` (nothing definite: a timeout, a DNS server that did not answer).

    ``details``: gRPC's status details of the failed call; ``tls``: whether the client uses
    TLS (for the hint of ``tls.tls_hint``).
    """
    text = details.lower()
    if "connection refused" in text:
        if ":" not in target:  # a bare host: gRPC dials its default port, 443, not sepp's
            return (f"connection refused: {target} names no port, so gRPC dialled 443: expected HOST:PORT, "
                    f"e.g. {target}:{DEFAULT_GRPC_PORT}")
        return f"connection refused: is sepp running on {target}?"
    if "http1.x server" in text:
        return (f"{target} answered but is not a gRPC server (is it sepp's HTTP port? the gRPC port is "
                f"{DEFAULT_GRPC_PORT} by default)")
    if "misformatted domain name" in text:
        return f"{target} is not a server address: expected HOST:PORT, e.g. 127.0.0.1:{DEFAULT_GRPC_PORT}"
    if any(marker in text for marker in _NO_SUCH_HOST):
        return f"no such host: the name in {target} does not resolve"
    for marker in _NO_PATH:
        if marker in text:
            return f"{marker}: is {target} the right address?"
    hint = tls_hint(details, tls)
    if hint:
        return f"cannot connect to {target}{hint}"
    return None


def first_contact_error(error: SeppError, details: str, target: str, *, tls: bool) -> Unavailable | None:
    """The error a call fails with at once because it is this process's first contact with
    ``target`` and nothing there can be connected to (module docstring), else ``None``.

    ``error``: the call's error as decoded (``error_from_rpc``); only an ``Unavailable`` of
    status ``UNAVAILABLE`` that provably was never sent (``not_sent``: no connection was
    made; not a connection that broke under the call) counts. ``details``: its gRPC status details. The result is an
    ``Unavailable`` (code ``UNAVAILABLE``, ``not_sent`` true: no connection was made) whose
    message is ``no_server_cause``'s plus "nothing was sent".
    """
    if not _no_connection(error) or has_reached(target):
        return None
    cause = no_server_cause(details, target, tls=tls)
    if cause is None:
        return None
    return Unavailable(f"{cause} (nothing was sent)", code=grpc.StatusCode.UNAVAILABLE, not_sent=True)


def _no_connection(error: SeppError) -> bool:
    """Whether ``error`` is gRPC's "no connection could be made" (``UNAVAILABLE``, ``not_sent``)."""
    return isinstance(error, Unavailable) and error.code == grpc.StatusCode.UNAVAILABLE and error.not_sent


def reached_a_server(error: SeppError) -> bool:
    """Whether a call that failed with ``error`` was answered by (or at least connected to) a
    server: any error but "no connection could be made" and ``DeadlineExceeded`` (which a
    connection attempt that never completes gives too). Such a call ``mark_reached`` its
    address."""
    return not _no_connection(error) and not isinstance(error, DeadlineExceeded)


def rpc_details(exc: BaseException) -> str:
    """The status details of a ``grpc.RpcError`` (sync or aio), ``""`` when it has none."""
    details = getattr(exc, "details", None)
    text = details() if callable(details) else None
    return text if isinstance(text, str) else ""


__all__ = ["DEFAULT_GRPC_PORT", "DEFAULT_TARGET", "TARGET_ENV", "URL_SCHEMES", "first_contact_error",
           "given_target", "has_reached", "mark_reached",
           "no_server_cause", "normalize_target", "reached_a_server", "rpc_details"]
