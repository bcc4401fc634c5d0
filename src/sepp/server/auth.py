"""Tokens and roles: the ``[[auth.tokens]]`` config model and the
``Authenticator`` that the gRPC interceptor (``sepp.server.rpc.authz``) and the web UI share.

A token is configured by its name, the hex SHA-256 of its secret (the secret itself is never
stored) and its roles, any of ``produce``, ``work``, ``admin``::

    [[auth.tokens]]
    name = "billing-producer"
    sha256 = "<64 hex digits>"
    roles = ["produce"]

Auth is on when at least one token is configured: then every call to the producer service
(``GetServerInfo`` included) needs a token with ``produce``, the worker service ``work``, the
admin service and the web UI ``admin``. The old ``admin_token`` key keeps working as one more
token named ``admin_token`` with role ``admin``; given alone (no ``[[auth.tokens]]``) it locks
only the admin service and the UI, as in earlier versions. A role grants its own service only
(``admin`` does not imply ``produce``): give a token several roles for several services.

A presented secret is hashed with SHA-256 and compared with every configured digest in
constant time (``hmac.compare_digest``), so neither a match nor its position leaks by timing.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

log = logging.getLogger("sepp.auth")

Role = Literal["produce", "work", "admin"]
#: Every role, in the order they are listed in messages and docs.
ROLES: tuple[Role, ...] = ("produce", "work", "admin")
#: The name the legacy ``admin_token`` key is known by (in logs and the UI session).
ADMIN_TOKEN_NAME = "admin_token"
#: A token name: letters, digits, ``.``, ``_``, ``-``; 1..64 characters, starting with a letter
#: or digit (it is written in logs, the UI and error messages).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The failure reasons counted by ``Authenticator.failures`` (``sepp_auth_failures_total{reason}``).
FAILURE_REASONS = ("missing", "unknown", "forbidden")
#: The bytes of entropy of a secret made by ``new_secret`` (``secrets.token_urlsafe``).
SECRET_BYTES = 32


def digest(secret: str) -> str:
    """The lower-case hex SHA-256 of ``secret`` (UTF-8): what ``sha256`` holds."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh random secret: 32 bytes from ``secrets``, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(SECRET_BYTES)


def check_name(value: str) -> str:
    """``value`` when it is a valid token name (``NAME_PATTERN``). Raises ``ValueError``."""
    if not isinstance(value, str) or NAME_PATTERN.fullmatch(value) is None:
        raise ValueError("a token name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter "
                         "or digit")
    return value


def check_roles(values: Iterable[str]) -> tuple[Role, ...]:
    """The roles, duplicates dropped, in ``ROLES`` order. Raises ``ValueError`` for an unknown
    role or none at all."""
    given = list(values)
    unknown = [v for v in given if v not in ROLES]
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r}: roles are any of {', '.join(ROLES)}")
    if not given:
        raise ValueError(f"needs at least one role ({', '.join(ROLES)})")
    return tuple(r for r in ROLES if r in given)


class TokenEntry(BaseModel):
    """One ``[[auth.tokens]]`` entry: ``name``, ``sha256`` (64 hex digits, any case; kept lower
    case) and ``roles`` (a non-empty subset of ``ROLES``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    sha256: str
    roles: tuple[Role, ...]

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("sha256")
    @classmethod
    def _check_sha256(cls, value: str) -> str:
        if len(value) != 64 or re.fullmatch(r"[0-9A-Fa-f]{64}", value) is None:
            raise ValueError("must be the hex SHA-256 of the secret: 64 hex digits (sepp token new prints it)")
        return value.lower()

    @field_validator("roles", mode="before")
    @classmethod
    def _check_roles(cls, value: object) -> tuple[Role, ...]:
        if not isinstance(value, list | tuple):
            raise ValueError(f"must be a list of roles ({', '.join(ROLES)})")
        return check_roles(str(v) for v in value)


class AuthSettings(BaseModel):
    """The ``[auth]`` table: ``tokens`` (names unique; auth is on when it holds one) and
    ``session_secret``, the key that signs web UI session cookies (at least 32 characters;
    give every node the same one so a session works on all of them and survives restarts;
    default: random per process, or derived from ``admin_token`` when that is set). The token
    digests alone are not secret enough to sign with: whoever reads the config could forge a
    session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: tuple[TokenEntry, ...] = Field(default=())
    session_secret: str | None = Field(default=None, min_length=32, repr=False)

    @field_validator("tokens")
    @classmethod
    def _unique(cls, value: tuple[TokenEntry, ...]) -> tuple[TokenEntry, ...]:
        seen: set[str] = set()
        for entry in value:
            if entry.name in seen:
                raise ValueError(f"token name {entry.name!r} is given twice; names must be unique")
            seen.add(entry.name)
        return value


def toml_entry(name: str, sha256: str, roles: Iterable[str]) -> str:
    """The ``[[auth.tokens]]`` TOML block for one token (what ``sepp token new`` prints)."""
    listed = ", ".join(f'"{r}"' for r in roles)
    return f'[[auth.tokens]]\nname = "{name}"\nsha256 = "{sha256}"\nroles = [{listed}]\n'


@dataclass(frozen=True, slots=True)
class Token:
    """A configured token as the authenticator knows it: name, digest (32 bytes), roles."""

    name: str
    sha256: bytes
    roles: frozenset[str]

    @property
    def marker(self) -> str:
        """A short digest of name and secret digest: what a UI session holds, so a removed or
        changed token logs its sessions out."""
        return hashlib.sha256(b"sepp-ui-auth:" + self.name.encode() + b":" + self.sha256).hexdigest()[:32]


@dataclass(slots=True)
class _Throttle:
    """At most one log line per ``period`` seconds per reason; the rest are counted."""

    period: float
    clock: Callable[[], float]
    last: dict[str, float] = field(default_factory=dict)
    suppressed: dict[str, int] = field(default_factory=dict)

    def take(self, reason: str) -> int | None:
        """None to stay quiet, else the number of lines suppressed since the last one."""
        now = self.clock()
        last = self.last.get(reason)
        if last is not None and now - last < self.period:
            self.suppressed[reason] = self.suppressed.get(reason, 0) + 1
            return None
        self.last[reason] = now
        return self.suppressed.pop(reason, 0)


class Authenticator:
    """Checks presented secrets against the configured tokens and counts the failures.

    Args:
        tokens: The ``[[auth.tokens]]`` entries.
        admin_token: The legacy ``admin_token`` secret (a token with role ``admin``), or None.
        log_period: Seconds between two log lines of the same failure reason (the lines in
            between are counted and reported with the next one).
        clock: Monotonic seconds (tests inject one).

    ``enforced`` is the set of roles that are checked: every role when ``tokens`` is not empty,
    ``{"admin"}`` with ``admin_token`` alone, none without either (auth off). ``failures`` counts
    the failures by reason (``missing``, ``unknown``, ``forbidden``) since start, a plain dict
    read by the metrics collector (``sepp_auth_failures_total{reason}``). Thread-safe.
    """

    def __init__(self, tokens: Iterable[TokenEntry] = (), admin_token: str | None = None, *,
                 session_secret: str | None = None, log_period: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        #: Secret material for the UI session key (``session_key``): the configured
        #: ``session_secret``, else ``admin_token``, else none (random per process).
        self._session_material = (session_secret or admin_token or "").encode() or None
        entries = [Token(t.name, bytes.fromhex(t.sha256), frozenset(t.roles)) for t in tokens]
        self.enforced: frozenset[str] = frozenset(ROLES) if entries else frozenset()
        if admin_token:
            entries.append(Token(ADMIN_TOKEN_NAME, hashlib.sha256(admin_token.encode()).digest(),
                                 frozenset({"admin"})))
            self.enforced |= {"admin"}
        self.tokens: tuple[Token, ...] = tuple(entries)
        self.failures: dict[str, int] = dict.fromkeys(FAILURE_REASONS, 0)
        self._throttle = _Throttle(log_period, clock)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, auth: AuthSettings, admin_token: str | None) -> Authenticator:
        """The authenticator of a ``ServerConfig`` (its ``auth`` and ``admin_token``)."""
        return cls(auth.tokens, admin_token, session_secret=auth.session_secret)

    def session_key(self) -> str:
        """The key that signs UI session cookies: an HMAC of the token names and digests under
        the secret material (so changing any token logs every session out), or 32 random
        bytes (hex) when there is none (sessions end with the process)."""
        if self._session_material is None:
            return secrets.token_hex(32)
        names = b"".join(t.name.encode() + b"\0" + t.sha256 for t in self.tokens)
        return hmac.new(self._session_material, b"sepp-ui-session-v2\0" + names, hashlib.sha256).hexdigest()

    @property
    def on(self) -> bool:
        """Whether any role is checked (a token is configured)."""
        return bool(self.enforced)

    def required(self, role: str) -> bool:
        """Whether a call needing ``role`` must present a token."""
        return role in self.enforced

    def identify(self, secret: str | None) -> Token | None:
        """The configured token whose digest matches ``secret``'s, else None. Every digest is
        compared (constant time each), so the time does not depend on which one matched."""
        if not secret:
            return None
        presented = hashlib.sha256(secret.encode()).digest()
        found: Token | None = None
        for token in self.tokens:
            if hmac.compare_digest(presented, token.sha256) and found is None:
                found = token
        return found

    def by_marker(self, name: object, marker: object) -> Token | None:
        """The token a UI session names (``name`` and ``Token.marker``), if it is still
        configured with the same secret and still has ``admin``; else None."""
        if not isinstance(name, str) or not isinstance(marker, str):
            return None
        for token in self.tokens:
            if token.name == name and "admin" in token.roles and hmac.compare_digest(token.marker, marker):
                return token
        return None

    def failed(self, reason: str, what: str, *, method: str = "", role: str = "", token: str = "") -> None:
        """Count a failure (``reason`` in ``FAILURE_REASONS``) and log ``what`` (never a secret)
        on ``sepp.auth`` at WARNING, at most once per ``log_period`` per reason.

        The line is the ``auth_failure`` event: its JSON fields are ``reason``, ``suppressed``
        (failures of that reason left out since the last line) and, when given, ``method`` (the
        gRPC method, or ``/login`` for the UI), ``role`` (the role needed) and ``token`` (the
        name of a known token without the role; never a secret)."""
        with self._lock:
            self.failures[reason] = self.failures.get(reason, 0) + 1
            suppressed = self._throttle.take(reason)
        if suppressed is None:
            return
        more = f" ({suppressed} more {reason} failures not logged)" if suppressed else ""
        fields: dict[str, object] = {"event": "auth_failure", "reason": reason, "suppressed": suppressed}
        fields.update((k, v) for k, v in (("method", method), ("role", role), ("token", token)) if v)
        log.warning("auth failure (%s): %s%s", reason, what, more, extra=fields)


def is_loopback(host: str) -> bool:
    """Whether a listen host (``HOST`` of ``HOST:PORT``; IPv6 in brackets or not) is loopback
    only: 127.0.0.0/8, ::1 or ``localhost``. Any other name or address (``0.0.0.0``, ``::``,
    a host name) counts as reachable from elsewhere."""
    import ipaddress

    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def exposed_listeners(listeners: dict[str, str]) -> list[str]:
    """``KEY HOST:PORT`` of every non-empty listen address (key → address) that is not
    loopback (``is_loopback``), in the order given."""
    return [f"{key} {addr}" for key, addr in listeners.items()
            if addr and not is_loopback(addr.rpartition(":")[0])]


def bearer(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The secret of the first ``authorization: Bearer <secret>`` entry of gRPC metadata
    (the scheme in any case), or None when there is none."""
    for key, value in metadata or ():
        if key != "authorization":
            continue
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        scheme, _, secret = text.strip().partition(" ")
        if scheme.lower() == "bearer" and secret.strip():
            return secret.strip()
        return None
    return None


def malformed_authorization(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """What is wrong with the first ``authorization`` entry of gRPC metadata when it carries no
    secret by ``bearer``'s reading — no ``Bearer`` scheme before the secret (``authorization:
    <secret>``), another scheme (``Basic …``), or ``Bearer`` with nothing after it — in words
    for the caller (the value is never repeated: it may be a secret); ``None`` when there is
    no such entry or it is a well-formed ``Bearer <secret>``."""
    for key, value in metadata or ():
        if key != "authorization":
            continue
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        scheme, _, secret = text.strip().partition(" ")
        if scheme.lower() == "bearer":
            return None if secret.strip() else "an authorization header with 'Bearer' and no token after it"
        if not scheme:
            return "an empty authorization header"
        if not secret.strip():
            return "an authorization header without the 'Bearer ' prefix"
        return "an authorization header with another scheme than 'Bearer'"
    return None


__all__ = ["ADMIN_TOKEN_NAME", "FAILURE_REASONS", "ROLES", "AuthSettings", "Authenticator", "Role", "Token",
           "TokenEntry", "bearer", "check_name", "check_roles", "digest", "exposed_listeners", "is_loopback",
           "malformed_authorization", "new_secret", "toml_entry"]
