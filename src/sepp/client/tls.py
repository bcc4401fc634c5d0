"""TLS channel credentials of the clients and the worker, from PEM files.

``channel_credentials(tls_ca, tls_cert, tls_key)`` reads and checks the files and builds
``grpc.ssl_channel_credentials``: ``tls_ca`` is the CA bundle the server's certificate must
chain to (``None``: the system's roots), ``tls_cert`` + ``tls_key`` the client's own
certificate and key for a server that requires one (mutual TLS). Every problem is one
``ValueError`` line naming the argument and the path: a file that cannot be read, one with
no PEM certificate or key in it, a certificate without its key (or the reverse), a key that
does not match its certificate. ``Client``, ``AsyncClient``, ``AdminClient`` and ``Worker``
take the same three keyword arguments; the CLI takes ``--tls-ca --tls-cert --tls-key``
(``SEPP_TLS_CA``, ``SEPP_TLS_CERT``, ``SEPP_TLS_KEY``).
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from sepp.client.options import ClientOptions

#: A path argument: ``str`` or ``os.PathLike`` (``pathlib.Path``).
PathArg = str | os.PathLike[str]


def _read(name: str, path: PathArg) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{name}: cannot read {os.fspath(path)}: {exc.strerror or exc}") from None


def _certificates(name: str, path: PathArg, data: bytes) -> bytes:
    """``data`` when it holds PEM certificates the ``ssl`` module can parse, else ``ValueError``."""
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ValueError(f"{name}: {os.fspath(path)} is not a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)")
    try:
        ssl.create_default_context().load_verify_locations(cadata=data.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{name}: {os.fspath(path)} is not a valid PEM certificate ({exc})") from None
    return data


def read_tls_files(tls_ca: PathArg | None = None, tls_cert: PathArg | None = None,
                   tls_key: PathArg | None = None) -> tuple[bytes | None, bytes | None, bytes | None]:
    """The checked PEM bytes of the three files (None where not given).

    Raises ``ValueError`` (one line, naming the argument) as described in the module docstring.
    """
    if (tls_cert is None) != (tls_key is None):
        given, missing = ("tls_cert", "tls_key") if tls_cert is not None else ("tls_key", "tls_cert")
        raise ValueError(f"{given} is given without {missing}: a client certificate needs both "
                         f"(--tls-cert and --tls-key)")
    ca = _certificates("tls_ca", tls_ca, _read("tls_ca", tls_ca)) if tls_ca is not None else None
    cert = key = None
    if tls_cert is not None and tls_key is not None:
        cert = _certificates("tls_cert", tls_cert, _read("tls_cert", tls_cert))
        key = _read("tls_key", tls_key)
        if b"PRIVATE KEY-----" not in key:
            raise ValueError(f"tls_key: {os.fspath(tls_key)} is not a PEM private key")
        if b"ENCRYPTED" in key:
            raise ValueError(f"tls_key: {os.fspath(tls_key)} is encrypted; give an unencrypted key")
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(tls_cert, tls_key, password="")
        except ssl.SSLError as exc:
            if "KEY_VALUES_MISMATCH" in str(exc):
                raise ValueError(f"tls_key: {os.fspath(tls_key)} does not match the certificate in tls_cert "
                                 f"({os.fspath(tls_cert)})") from None
            raise ValueError(f"tls_key: cannot use {os.fspath(tls_key)} with {os.fspath(tls_cert)}: {exc}") from None
    return ca, cert, key


def channel_credentials(tls_ca: PathArg | None = None, tls_cert: PathArg | None = None,
                        tls_key: PathArg | None = None) -> grpc.ChannelCredentials | None:
    """``grpc.ssl_channel_credentials`` from the files; None when none is given (plaintext).

    Raises ``ValueError`` for a bad file or combination (module docstring).
    """
    if tls_ca is None and tls_cert is None and tls_key is None:
        return None
    ca, cert, key = read_tls_files(tls_ca, tls_cert, tls_key)
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def with_tls(options: ClientOptions, tls_ca: PathArg | None, tls_cert: PathArg | None,
             tls_key: PathArg | None) -> ClientOptions:
    """``options`` with ``credentials`` built from the files (unchanged when none is given).

    Raises ``ValueError`` for a bad file, and when ``options.credentials`` is set as well
    (two sources of TLS settings).
    """
    credentials = channel_credentials(tls_ca, tls_cert, tls_key)
    if credentials is None:
        return options
    if options.credentials is not None:
        raise ValueError("give TLS either as tls_ca/tls_cert/tls_key or as ClientOptions.credentials, not both")
    return replace(options, credentials=credentials)


#: What gRPC core says when a TLS handshake failed; OpenSSL's reason follows its marker.
_HANDSHAKE = re.compile(r"(?:tls|ssl) handshake failed", re.IGNORECASE)
_OPENSSL = "OPENSSL_internal:"


def tls_hint(details: str, tls: bool) -> str:
    """A few words on what a failed connection says about TLS, for the ``Unavailable`` a
    call gets when no connection could be made, or "".

    ``details``: gRPC's status details of the last try; ``tls``: whether the channel uses
    TLS. A failed handshake names OpenSSL's reason (``CERTIFICATE_VERIFY_FAILED: unable to
    get local issuer certificate`` — the server's certificate is not from ``tls_ca``). A
    connection the server closed at once is what a server requiring a client certificate
    does to a TLS client without one, and what a TLS server does to a plaintext client.
    """
    match = _HANDSHAKE.search(details)
    if match:
        rest = details[match.end():]
        reason = rest.split(_OPENSSL, 1)[1] if _OPENSSL in rest else rest.lstrip(" :")
        return f"; TLS handshake failed ({reason.removesuffix(': OK').strip()})"
    if "socket closed" in details.lower():
        if tls:
            return ("; the server closed the connection during the TLS handshake: it may require a client "
                    "certificate (tls_cert/tls_key, --tls-cert/--tls-key) signed by its tls_client_ca")
        return "; the server closed the connection: if it serves TLS, give its CA (tls_ca, --tls-ca)"
    return ""


__all__ = ["PathArg", "channel_credentials", "read_tls_files", "tls_hint", "with_tls"]
