"""Connections and schema of the PostgreSQL backend: connect with the server settings sepp
needs, create and migrate the schema under an advisory lock, and turn a connection failure
into one line.

Migrations are ``migrations/NNNN_*.sql``, applied in order, each in the transaction that
holds ``pg_advisory_xact_lock`` on the schema's key: three nodes started at once on an
empty database serialize on the lock, the first creates the schema and the others find it
done. The applied versions are rows of ``schema_migrations``; a database whose newest
version is above what this build knows is refused (``StoreCorrupt``).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from sepp.storage._sql import migrations
from sepp.storage.errors import StoreCorrupt, StoreError, StoreUnavailable
from sepp.storage.postgres.admission import AdmissionSettings, grant_app_role, publish

_PKG = "sepp.storage.postgres"
#: What ``[postgres] schema`` accepts: a plain lower-case SQL identifier (no quoting needed).
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: Seconds a connection attempt may take before it counts as unreachable.
CONNECT_TIMEOUT = 10.0


def latest_version() -> int:
    """The newest schema version this build knows (the highest migration number)."""
    known = migrations(_PKG)
    return known[-1][0] if known else 0


#: ``password=…`` in the key/value DSN form and in a URL's query (never printed).
_KV_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)")


def redact(dsn: str) -> str:
    """``dsn`` with its password replaced by ``***`` (for messages and logs): in the URL's
    user info, in a ``?password=`` parameter and in the key/value form (``host=… password=…``)."""
    masked = _KV_PASSWORD.sub(lambda m: m.group(1) + "***", dsn)
    if "://" not in dsn:
        return masked
    try:
        parts = urlsplit(masked)
        password = parts.password
    except ValueError:
        return "<unparsable DSN>"
    if password is None:
        return masked
    netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _os_reason(exc: OSError) -> str:
    """The system's words for ``exc`` ("Connection refused"), whichever event loop raised it:
    asyncio's own loop says "Connect call failed ('127.0.0.1', 5999)" where uvloop says
    "Connection refused" for the same errno, so ``sepp migrate`` (asyncio) and ``sepp serve``
    (uvloop) worded one unreachable DSN differently. Falls back to the exception's text when
    it carries no errno (asyncio's "Multiple exceptions: …")."""
    if isinstance(exc.errno, int) and exc.errno > 0:
        return os.strerror(exc.errno)
    return str(exc.strerror or exc)


def describe_failure(exc: BaseException, dsn: str) -> str:
    """One line saying why ``dsn`` could not be used (no traceback, password hidden)."""
    where = redact(dsn)
    if isinstance(exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError):
        return f"PostgreSQL at {where} refused the login: {exc}"
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"PostgreSQL at {where}: {exc} (create it first, e.g. createdb)"
    if isinstance(exc, socket.gaierror):
        return f"PostgreSQL at {where} cannot be reached: unknown host ({exc.strerror or exc})"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return f"PostgreSQL at {where} cannot be reached: no answer within {CONNECT_TIMEOUT:g} s"
    if isinstance(exc, OSError):
        return f"PostgreSQL at {where} cannot be reached: {_os_reason(exc)}"
    if isinstance(exc, ValueError):  # asyncpg's DSN parser, e.g. a port that is not a number
        return f"postgres_dsn {where} is not a valid PostgreSQL URL ({' '.join(str(exc).split())}); " \
               "expected postgresql://USER[:PASSWORD]@HOST:PORT/DB"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"PostgreSQL at {where}: {text}"


def connect_error(exc: BaseException, dsn: str) -> StoreError:
    """The ``StoreError`` for a failed connection attempt: ``StoreUnavailable`` when the
    server may come back (refused, timed out, starting up), else ``StoreError`` (bad login,
    missing database, bad DSN), with ``describe_failure``'s line."""
    line = describe_failure(exc, dsn)
    transient = isinstance(exc, OSError | TimeoutError | asyncio.TimeoutError | asyncpg.CannotConnectNowError
                           | asyncpg.PostgresConnectionError) and not isinstance(exc, socket.gaierror)
    return (StoreUnavailable if transient else StoreError)(line)


#: Seconds a sepp session may sit idle inside an open transaction before PostgreSQL ends it
#: (``idle_in_transaction_session_timeout``). sepp's own transactions never wait for
#: anything but PostgreSQL, so only a node that froze mid-transaction (SIGSTOP, a paused VM)
#: hits it — and then its row locks (an idempotency key it was claiming) are released
#: instead of stalling every other node's writers (attack finding B5).
IDLE_TX_TIMEOUT = 5.0


def server_settings(schema: str, mode: str, application: str, idle_tx_timeout: float = IDLE_TX_TIMEOUT
                    ) -> dict[str, str]:
    """The session settings of every sepp connection: ``search_path`` = the sepp schema,
    ``synchronous_commit`` = ``off`` in async mode (a crash of PostgreSQL itself may lose
    the last moments of commits; docs/deploying.md), ``on`` otherwise;
    ``idle_in_transaction_session_timeout`` = ``idle_tx_timeout`` seconds
    (``IDLE_TX_TIMEOUT``); TCP keepalives every 10 s (a node cut off by a partition is
    noticed by PostgreSQL within about 25 s, and its locks released); ``statement_timeout``
    and ``lock_timeout`` 0 whatever the role's default (a role-level timeout cancelled
    sepp's sweeps and group commits; finding B7: sepp bounds its own waits)."""
    return {"search_path": schema, "synchronous_commit": "off" if mode == "async" else "on",
            "application_name": application[:63],
            "idle_in_transaction_session_timeout": str(int(idle_tx_timeout * 1000)),
            "tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3",
            "statement_timeout": "0", "lock_timeout": "0"}


async def connect(dsn: str, schema: str, mode: str = "group", application: str = "sepp",
                  idle_tx_timeout: float = IDLE_TX_TIMEOUT) -> asyncpg.Connection:
    """One connection with ``server_settings``. Raises ``StoreUnavailable`` / ``StoreError``
    (``connect_error``) when it cannot be made."""
    try:
        return await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT,
                                     server_settings=server_settings(schema, mode, application, idle_tx_timeout))
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
        raise connect_error(exc, dsn) from None


def _lock_key(schema: str) -> str:
    return f"sepp.migrate:{schema}"


async def migrate(conn: asyncpg.Connection, schema: str, up_to: int | None = None) -> tuple[int, int]:
    """Create ``schema`` if needed and apply the migrations it lacks, under the advisory
    lock of the schema (one migrator at a time across every node). Returns (version before,
    version after).

    ``up_to`` is the highest version to migrate to: the migrations numbered above it are
    left out, as if this build knew none of them (a database already past it is refused).
    ``None``, the default, means every known migration (``latest_version``); tests pass a
    number to build, or act as, an older version.

    Raises ``StoreCorrupt`` when the database's schema is newer than this build knows (or
    than ``up_to``) and ``StoreError`` when a migration fails (rolled back: nothing
    half-applied)."""
    if not SCHEMA_NAME.match(schema):
        raise StoreError(f"postgres.schema {schema!r} is not a plain lower-case SQL name")
    known = [m for m in migrations(_PKG) if up_to is None or m[0] <= up_to]
    latest = known[-1][0] if known else 0
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", _lock_key(schema))
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            await conn.execute(f"CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
                               "version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz "
                               "NOT NULL DEFAULT now())")
            current = await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {schema}.schema_migrations")
            if current > latest:
                raise StoreCorrupt(f"database schema {schema} is at version {current}, newer than this sepp "
                                   f"knows ({latest}): upgrade sepp, or point it at another schema")
            await conn.execute(f"SET LOCAL search_path = {schema}")
            for number, name, sql in known:
                if number <= current:
                    continue
                await conn.execute(sql)
                await conn.execute(f"INSERT INTO {schema}.schema_migrations (version, name) VALUES ($1, $2)",
                                   number, name)
            # The SQL enqueue functions' settings: the defaults until a node or `sepp migrate`
            # writes its own (sepp.storage.postgres.admission).
            await publish(conn, schema, AdmissionSettings(), replace=False)
    except asyncpg.PostgresError as exc:
        raise StoreError(f"cannot migrate PostgreSQL schema {schema}: {' '.join(str(exc).split())}") from exc
    return int(current), max(int(current), latest)


async def migrate_dsn(dsn: str, schema: str = "sepp", admission: AdmissionSettings | None = None,
                      app_role: str | None = None) -> tuple[int, int]:
    """``sepp migrate``: connect to ``dsn``, ``migrate`` ``schema``, write ``admission`` (the
    configuration's strict mode, limits and queue defaults, for the SQL enqueue functions),
    grant ``app_role`` what an application needs to enqueue in its own transactions
    (``admission.grant_app_role``), disconnect. Returns (version before, version after).
    Raises ``StoreUnavailable`` / ``StoreError`` / ``StoreCorrupt`` with a one-line message."""
    conn = await connect(dsn, "public", application="sepp migrate")
    try:
        versions = await migrate(conn, schema)
        try:
            if admission is not None:
                await publish(conn, schema, admission)
            if app_role is not None:
                await grant_app_role(conn, schema, app_role)
        except (asyncpg.PostgresError, ValueError) as exc:
            raise StoreError(f"cannot grant or configure schema {schema}: {' '.join(str(exc).split())}") from exc
        return versions
    finally:
        await conn.close()


async def fetch_version(conn: asyncpg.Connection, schema: str) -> int:
    """The applied schema version of ``schema`` (0 when it has none)."""
    exists: Any = await conn.fetchval("SELECT to_regclass($1)", f"{schema}.schema_migrations")
    if exists is None:
        return 0
    return int(await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {schema}.schema_migrations"))
