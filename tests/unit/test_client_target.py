"""The server address a client takes and the causes a first contact names (``sepp.client.target``).

The causes are read from gRPC's status details; the strings below are what grpcio 1.6x says
(recorded against real sockets: a closed port, sepp's HTTP port, an unknown host).
test_first_contact.py checks the same end to end.
"""

from __future__ import annotations

import grpc
import pytest

from sepp import Client
from sepp.client._core import error_from_status, never_sent
from sepp.client.target import (
    first_contact_error,
    mark_reached,
    no_server_cause,
    normalize_target,
    reached_a_server,
)
from sepp.errors import Unavailable
from sepp.worker import WorkerConfig

REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7799: Failed to connect to "
           "remote host: Connection refused")
HTTP1 = ("failed to connect to all addresses; last error: UNIMPLEMENTED: ipv4:127.0.0.1:7701: Failed parsing HTTP/2 "
         "(Expected SETTINGS frame as the first frame, got frame type 80) (Trying to connect an http1.x server "
         "(HTTP status 404))")
NO_HOST = ("errors resolving nowhere.invalid:7700: [field:hostname lookup error:address lookup failed for "
           "nowhere.invalid:7700: Domain name not found]")
MISFORMATTED = ("errors resolving foo bar:7700: [field:hostname lookup error:address lookup failed for foo bar:7700: "
                "Misformatted domain name]")


@pytest.mark.parametrize(("target", "tls", "expected"), [
    ("127.0.0.1:7700", False, "127.0.0.1:7700"),
    ("grpc://127.0.0.1:7700", False, "127.0.0.1:7700"),
    ("http://127.0.0.1:7700", False, "127.0.0.1:7700"),
    ("HTTP://sepp.internal:7700/", False, "sepp.internal:7700"),
    ("http://[::1]:7700", False, "[::1]:7700"),
    ("https://sepp.example.com:443", True, "sepp.example.com:443"),
    ("grpcs://sepp.example.com:7700", True, "sepp.example.com:7700"),
    ("http://127.0.0.1:7700", True, "127.0.0.1:7700"),  # TLS comes from the TLS options, not the prefix
    # gRPC's own forms pass untouched
    ("dns:///sepp.internal:7700", False, "dns:///sepp.internal:7700"),
    ("ipv4:10.0.0.1:7700,10.0.0.2:7700", False, "ipv4:10.0.0.1:7700,10.0.0.2:7700"),
    ("unix:///run/sepp.sock", False, "unix:///run/sepp.sock"),
    ("sepp.example.com", False, "sepp.example.com"),
])
def test_a_prefix_is_removed_and_anything_else_is_left_to_grpc(target: str, tls: bool, expected: str) -> None:
    assert normalize_target(target, tls=tls) == expected


@pytest.mark.parametrize(("target", "says"), [
    ("https://127.0.0.1:7700", "asks for TLS (https://) and none is configured"),
    ("grpcs://127.0.0.1:7700", "asks for TLS (grpcs://)"),
    ("http://127.0.0.1:7700/jobs", "expected HOST:PORT"),
    ("http://127.0.0.1:7700//", "expected HOST:PORT"),  # one trailing slash is the limit
    ("http://127.0.0.1:7700?x=1", "expected HOST:PORT"),
    ("http://", "expected HOST:PORT"),
    ("http://127.0.0.1", "names no port"),
    ("http://127.0.0.1:", "names no port"),
    ("http://:7700", "names no port"),
    ("grpc://127.0.0.1:http", "names no port"),
])
def test_a_prefixed_target_that_is_not_host_port_is_refused_naming_the_form(target: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        normalize_target(target, tls=False)
    assert says in str(info.value) and target in str(info.value)


@pytest.mark.parametrize("port", ["7700", "1", "65535"])
def test_a_bare_port_is_refused_suggesting_the_loopback_host(port: str) -> None:
    expected = f"{port!r} names no host: expected HOST:PORT, e.g. 127.0.0.1:{port}"
    with pytest.raises(ValueError) as info:
        normalize_target(port, tls=False)
    assert str(info.value) == expected
    with pytest.raises(ValueError) as made:
        Client(port)  # the message a user sees (nothing is dialled: made refuses first)
    assert str(made.value) == expected
    with pytest.raises(ValueError, match="names no host"):
        WorkerConfig(port, ("q",))
    # one character more is a host name, or a HOST:PORT: left to gRPC
    assert normalize_target(f"h{port}", tls=False) == f"h{port}"
    assert normalize_target(f"127.0.0.1:{port}", tls=False) == f"127.0.0.1:{port}"


def test_the_worker_config_takes_the_same_forms() -> None:
    assert WorkerConfig("grpc://127.0.0.1:7700", ("q",)).target == "127.0.0.1:7700"
    with pytest.raises(ValueError, match="asks for TLS"):
        WorkerConfig("https://127.0.0.1:7700", ("q",))


@pytest.mark.parametrize(("details", "cause"), [
    (REFUSED, "connection refused: is sepp running on T:1?"),
    (HTTP1, "T:1 answered but is not a gRPC server (is it sepp's HTTP port? the gRPC port is 7700 by default)"),
    (NO_HOST, "no such host: the name in T:1 does not resolve"),
    (MISFORMATTED, "T:1 is not a server address: expected HOST:PORT, e.g. 127.0.0.1:7700"),
    ("failed to connect to all addresses; last error: UNKNOWN: ipv4:10.1.1.1:7700: Failed to connect to remote "
     "host: No route to host", "no route to host: is T:1 the right address?"),
    ("failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7700: Socket closed",
     "cannot connect to T:1; the server closed the connection: if it serves TLS, give its CA (tls_ca, --tls-ca)"),
    # nothing definite: waited out (a slow network, a DNS server that does not answer)
    ("failed to connect to all addresses; last error: UNKNOWN: ipv4:10.1.1.1:7700: Connection timed out", None),
    ("DNS resolution failed for sepp.internal:7700: C-ares status is not ARES_SUCCESS", None),
    ("", None),
])
def test_the_cause_is_named_only_when_it_is_definite(details: str, cause: str | None) -> None:
    assert no_server_cause(details, "T:1", tls=False) == cause


def test_a_refused_address_without_a_port_says_grpc_dialled_443() -> None:
    # "--server 127.0.0.1": gRPC dials 443, and "is sepp running on 127.0.0.1?" would not say why.
    assert no_server_cause(REFUSED, "127.0.0.1", tls=False) == (
        "connection refused: 127.0.0.1 names no port, so gRPC dialled 443: expected HOST:PORT, e.g. 127.0.0.1:7700")


def test_a_name_that_does_not_resolve_was_never_sent() -> None:
    assert never_sent(NO_HOST) and never_sent(MISFORMATTED)


def test_only_a_first_contact_without_a_connection_fails_fast() -> None:
    target = "first-contact.test:7700"
    refused = error_from_status(grpc.StatusCode.UNAVAILABLE, REFUSED, None, target=target)
    fast = first_contact_error(refused, REFUSED, target, tls=False)
    assert isinstance(fast, Unavailable) and fast.not_sent and fast.code == grpc.StatusCode.UNAVAILABLE
    assert str(fast) == f"connection refused: is sepp running on {target}? (nothing was sent)"
    # A connection that broke under the call may have delivered it: never a first-contact error.
    broken = error_from_status(grpc.StatusCode.UNAVAILABLE, "Socket closed", None, target=target)
    assert first_contact_error(broken, "Socket closed", target, tls=False) is None
    # A stopping server's CANCELLED is not_sent, but it proves a server was there.
    cancelled = error_from_status(grpc.StatusCode.CANCELLED, "CANCELLED", None, target=target)
    assert first_contact_error(cancelled, REFUSED, target, tls=False) is None
    assert reached_a_server(cancelled) and reached_a_server(broken) and not reached_a_server(refused)
    # A deadline proves nothing: a connection attempt that never completes ends that way too.
    assert not reached_a_server(error_from_status(grpc.StatusCode.DEADLINE_EXCEEDED, "", None))
    mark_reached(target)  # once reached, a refused connection is a restart: waited for
    assert first_contact_error(refused, REFUSED, target, tls=False) is None
