"""TLS and mutual TLS of ``sepp serve`` (docs/operations.md "TLS and mutual TLS").

``load_server_tls(config)`` reads and checks the PEM files of ``tls_cert``, ``tls_key`` and
``tls_client_ca`` with the standard ``ssl`` module *before* anything is bound, so a missing
or unreadable path, a file that is not PEM, or a key that does not belong to its
certificate is one ``ConfigError`` line naming the key (``sepp serve`` prints it and exits
2). The same bytes then make the gRPC server credentials (``grpc_credentials``) and the
uvicorn settings of the HTTP listener (``uvicorn_settings``): both serve TLS only, and with
``tls_client_ca`` both require a client certificate signed by that CA.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import grpc

from sepp.server.config import ConfigError, ServerConfig

TlsMode = Literal["off", "on", "mtls"]


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """The checked TLS files of a server: PEM bytes and the paths they came from.

    ``client_ca`` is empty without mutual TLS.
    """

    cert_path: str
    key_path: str
    client_ca_path: str
    cert: bytes
    key: bytes
    client_ca: bytes

    @property
    def mode(self) -> TlsMode:
        """``mtls`` with a client CA, else ``on`` (the ready line's ``tls=`` field)."""
        return "mtls" if self.client_ca else "on"

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Server credentials for ``add_secure_port``; client certificates are required
        (and checked against ``client_ca``) with mutual TLS."""
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.client_ca or None,
                                           require_client_auth=bool(self.client_ca))

    def uvicorn_settings(self) -> dict[str, Any]:
        """``uvicorn.Config`` keyword arguments: TLS on the socket sepp binds (uvicorn wraps
        it with ``loop.create_server(sock=…, ssl=…)``), ``CERT_REQUIRED`` with mutual TLS."""
        settings: dict[str, Any] = {"ssl_certfile": self.cert_path, "ssl_keyfile": self.key_path}
        if self.client_ca:
            settings.update(ssl_ca_certs=self.client_ca_path, ssl_cert_reqs=ssl.CERT_REQUIRED)
        return settings


def _read(key: str, path: str) -> bytes:
    """The bytes of the file ``key`` names; ``ConfigError`` naming the key when unreadable."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


def _reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason in a few words (``KEY_VALUES_MISMATCH``, ``NO_START_LINE``…)."""
    return str(exc.reason or exc.strerror or exc).replace("_", " ").lower()


def _check_certificates(key: str, path: str, data: bytes) -> None:
    """Refuse a file with no PEM certificate in it (``ConfigError`` naming ``key``)."""
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ConfigError(f"{key}: {path} is not a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)")
    try:
        ssl.create_default_context().load_verify_locations(cadata=data.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
        why = _reason(exc) if isinstance(exc, ssl.SSLError) else "not ASCII text"
        raise ConfigError(f"{key}: {path} is not a valid PEM certificate ({why})") from None


def load_server_tls(config: ServerConfig) -> ServerTLS | None:
    """Read and check ``config.tls_cert`` / ``tls_key`` / ``tls_client_ca``; None when TLS is off.

    Raises ``ConfigError`` (one line, naming the key and the path) for a file that cannot be
    read, one that holds no PEM certificate (cert, client CA) or no PEM private key (key;
    an encrypted key is refused too: nobody could type its password at start), and a key
    that does not match the certificate. ``ServerConfig`` already refused a cert without a
    key (or the reverse) and a client CA without them.
    """
    if not config.tls_cert.strip():
        return None
    cert_path, key_path, ca_path = config.tls_cert, config.tls_key, config.tls_client_ca.strip()
    cert, key = _read("tls_cert", cert_path), _read("tls_key", key_path)
    client_ca = _read("tls_client_ca", ca_path) if ca_path else b""
    _check_certificates("tls_cert", cert_path, cert)
    if b"PRIVATE KEY-----" not in key:
        raise ConfigError(f"tls_key: {key_path} is not a PEM private key (no '-----BEGIN … PRIVATE KEY-----' line)")
    if b"ENCRYPTED" in key:
        raise ConfigError(f"tls_key: {key_path} is encrypted; give an unencrypted key (readable only by sepp)")

    def no_password() -> str:
        raise ConfigError(f"tls_key: {key_path} is encrypted; give an unencrypted key (readable only by sepp)")

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path, password=no_password)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise ConfigError(f"tls_key: {key_path} does not match the certificate in tls_cert ({cert_path})") from None
        raise ConfigError(f"tls_key: cannot use {key_path} with {cert_path}: {_reason(exc)}") from None
    except OSError as exc:  # the file changed between the two reads
        raise ConfigError(f"tls_key: cannot read {key_path}: {exc.strerror or exc}") from None
    if client_ca:
        _check_certificates("tls_client_ca", ca_path, client_ca)
    return ServerTLS(cert_path, key_path, ca_path, cert, key, client_ca)


__all__ = ["ServerTLS", "TlsMode", "load_server_tls"]
