"""Whether a listen address is taken, and the one line ``sepp serve`` says when it is.

``sepp serve`` looks at both listeners (``grpc_listen``, ``http_listen``) before it opens the
store, so a port held by another process — another sepp, most often — ends the start at
once with ``port 7700 is in use (another sepp?); choose another with --grpc-listen`` instead
of gRPC core's own log line and its ``GRPC_VERBOSITY`` advice (docs/decisions.md "A taken
port is one line"). The look is a ``bind`` with ``SO_REUSEADDR`` (as gRPC and the HTTP listener
bind), never a ``listen``: a port left in ``TIME_WAIT`` by a server that just stopped is
free, a port some process listens on is not.
"""

from __future__ import annotations

import errno
import socket

#: The flag that sets each listen key, for the message.
FLAGS = {"grpc_listen": "--grpc-listen", "http_listen": "--http-listen"}


def split_address(address: str) -> tuple[str, int] | None:
    """``HOST:PORT`` → (host without IPv6 brackets, port); ``None`` when the port is not a
    number (the listener reports that itself)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def in_use(address: str) -> bool:
    """Whether every address ``HOST:PORT`` resolves to is held by a listening socket (what
    makes gRPC's bind fail: it binds what it can of them). ``False`` for port 0 (any free
    port), an address that does not resolve, or one that cannot be bound for another reason
    (no permission, not a local address): the listener says what is wrong then."""
    parts = split_address(address)
    if parts is None or parts[1] == 0:
        return False
    host, port = parts
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return False
    if not infos:
        return False
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(sockaddr)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return False
        else:
            return False
    return True


def taken(key: str, address: str) -> str:
    """The message for a listen address that is in use: ``port 7700 is in use (another
    sepp?); choose another with --grpc-listen``. ``key``: ``grpc_listen`` or ``http_listen``."""
    parts = split_address(address)
    port = parts[1] if parts is not None else address
    return f"port {port} is in use (another sepp?); choose another with {FLAGS.get(key, key)}"


def check_free(listeners: dict[str, str]) -> None:
    """Raise ``address_in_use`` for the first listen
    address (key → ``HOST:PORT``; an empty one is off) that is in use."""
    for key, address in listeners.items():
        if address and in_use(address):
            raise address_in_use(key, address)


def address_in_use(key: str, address: str) -> OSError:
    """The ``OSError`` of ``taken``: its text is the message alone (no ``[Errno 98]``), its
    ``errno`` ``EADDRINUSE``."""
    error = OSError(taken(key, address))
    error.errno = errno.EADDRINUSE
    return error


__all__ = ["FLAGS", "address_in_use", "check_free", "in_use", "split_address", "taken"]
