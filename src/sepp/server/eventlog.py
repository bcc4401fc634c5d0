"""The server's significant-event log lines: the start line's masked config
summary, and a rate limit for events that can come in floods (dead-letters, overload).

The lines themselves are written where the events happen — ``sepp.server`` (start),
``sepp.queues`` (queue declared, changed, paused, resumed, deleted, created on first
enqueue), ``sepp.engine`` (job dead-lettered, overload), ``sepp.sweeper`` (leases expired),
``sepp.auth`` (auth failures) — each with its facts in the message and as ``extra=`` fields
(the JSON lines' ``queue``, ``job_id``, ``reason``, ``count``, …; ``sepp.logs``). No line
carries payload bytes, custom values or a secret.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

#: What a masked secret reads as.
MASK = "***"

_KV_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)([^&]*)")


def mask_dsn(dsn: str) -> str:
    """``dsn`` with its password replaced by ``***``: in the URL form
    (``postgresql://user:secret@host/db`` → ``postgresql://user:***@host/db``), in a
    ``?password=`` parameter and in the key/value form (``password=secret``). A DSN that
    cannot be parsed is shown as ``***`` whole."""
    if not dsn:
        return dsn
    out = dsn
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
            if parts.password is not None:
                host = parts.hostname or ""
                if ":" in host:
                    host = f"[{host}]"
                port = f":{parts.port}" if parts.port is not None else ""
                user = parts.username or ""
                out = urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}{port}"))
        except ValueError:
            return MASK
        out = _QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, out)
    return _KV_PASSWORD.sub(lambda m: m.group(1) + MASK, out)


def dsn_password(dsn: str) -> str:
    """The password as written in ``dsn`` (percent-encoded in a URL; "" when none), to be
    masked in every line."""
    if "://" in dsn:
        try:
            password = urlsplit(dsn).password
        except ValueError:
            password = None
        if password:
            return password
        found = _QUERY_PASSWORD.search(dsn)
        return found.group(2) if found else ""
    found = _KV_PASSWORD.search(dsn)
    return found.group(2).strip("'") if found else ""


def _tokens(config: Any) -> list[Any]:
    """The ``[[auth.tokens]]`` entries of ``config`` (none when this build has no auth table)."""
    auth = getattr(config, "auth", None)
    tokens = getattr(auth, "tokens", None) if auth is not None else None
    return list(tokens) if tokens else []


def config_secrets(config: Any) -> list[str]:
    """Every secret ``config`` holds, for the log handler to mask wherever it appears: the
    admin token, the PostgreSQL password (as written and percent-decoded), the token digests
    of ``[[auth.tokens]]`` and ``[auth] session_secret``."""
    password = dsn_password(getattr(config, "postgres_dsn", "") or "")
    out = [getattr(config, "admin_token", None) or "", password, unquote(password)]
    out += [str(getattr(t, "sha256", "") or "") for t in _tokens(config)]
    auth = getattr(config, "auth", None)
    out.append(str(getattr(auth, "session_secret", None) or ""))  # the UI session key's material
    return list(dict.fromkeys(s for s in out if s))


def config_summary(config: Any, node: str) -> dict[str, Any]:
    """What the start line shows of ``config`` (a ``ServerConfig``): the settings an operator
    checks first, with every secret masked — the DSN's password as ``***``, ``admin_token``
    as ``***`` when set, the whole auth section as ``"N tokens"`` — and nothing else (a
    setting added later is not shown until it is listed here, so it cannot leak)."""
    out: dict[str, Any] = {"node": node, "storage": config.storage}
    if config.storage == "postgres":
        out["postgres_dsn"] = mask_dsn(config.postgres_dsn)
        out["schema"] = config.postgres.schema
    else:
        out["data_dir"] = str(config.data_dir)
        out["writer"] = config.writer_placement
    out.update(grpc_listen=config.grpc_listen, http_listen=config.http_listen or "off",
               persist_mode=config.persist_mode, strict=config.strict, queues=len(config.queues),
               max_commit_backlog=config.max_commit_backlog, log_level=config.log_level,
               log_format=getattr(config, "log_format", "text"))
    out["admin_token"] = MASK if getattr(config, "admin_token", None) else "unset"
    tokens = _tokens(config)
    out["auth"] = f"{len(tokens)} token{'' if len(tokens) == 1 else 's'}" if tokens else "off"
    if getattr(config, "tls_cert", None):
        out["tls"] = "mutual" if getattr(config, "tls_client_ca", None) else "on"
    return out


def summary_text(summary: dict[str, Any]) -> str:
    """The summary as ``key=value`` pairs for a text line."""
    return " ".join(f"{key}={value}" for key, value in summary.items())


class RateLimited:
    """Log an event at most ``burst`` times per ``every`` seconds; the ones over are counted
    and the count is told in the next line that is let through (``suppressed`` field:
    "… (and 12 more in the last 5.0 s)"), so a flood costs a few lines, not one per event.

    ``clock`` is ``time.monotonic`` unless given (tests).
    """

    __slots__ = ("_clock", "_left", "_since", "_suppressed", "burst", "every", "logger")

    def __init__(self, logger: logging.Logger, *, burst: int = 10, every: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.burst, self.every, self._clock = logger, burst, every, clock
        self._since = -every
        self._left = 0
        self._suppressed = 0

    def log(self, level: int, msg: str, *args: Any, extra: dict[str, Any] | None = None) -> bool:
        """Log ``msg % args`` with ``extra`` unless over the rate; returns whether it was logged."""
        now = self._clock()
        if now - self._since >= self.every:
            self._since, self._left = now, self.burst
        if self._left <= 0:
            self._suppressed += 1
            return False
        self._left -= 1
        fields = dict(extra or {})
        if self._suppressed:
            fields["suppressed"] = self._suppressed
            msg = f"{msg} (and %d more not logged since the last such line)"
            args = (*args, self._suppressed)
            self._suppressed = 0
        self.logger.log(level, msg, *args, extra=fields)
        return True


__all__ = ["MASK", "RateLimited", "config_secrets", "config_summary", "dsn_password", "mask_dsn", "summary_text"]
