"""What the SQL enqueue functions need of a node's configuration, and the application role.

``sepp.enqueue(...)`` (migration 0014, docs/enqueue-in-transaction.md) runs inside an
application's transaction, without a node: the server-wide settings a node validates with
(strict mode, ``[limits]``, ``queue_defaults``) are in the schema's ``admission`` row.
``sepp migrate`` writes them from its configuration and every node at start writes its own
(``PostgresStore.open``), so the row is the configuration of the node that started last —
the nodes of one cluster share one configuration (docs/deploying.md). A schema created
without either (a store opened by a test) gets the documented defaults.

``grant_app_role``: the role an application enqueues with (``sepp migrate --app-role``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import asyncpg

from sepp.limits import QueueSettings, ServerLimits

#: The schema version that brought the ``admission`` row and the SQL enqueue functions.
SQL_ENQUEUE_VERSION = 14
#: The functions an application role may call (their signatures, for GRANT).
APP_FUNCTIONS = (
    "enqueue(text, text, bytea, text, jsonb, integer, integer, timestamptz, text, jsonb)",
    "enqueue_batch(text[], text[], bytea[], text[], jsonb[], integer[], integer[], timestamptz[], text[], jsonb[])",
    "admission_limits(text[])",
)
#: What ``--app-role`` accepts: a plain lower-case SQL name (no quoting needed).
ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """The admission row: ``strict`` mode, the server-wide ``limits`` and the settings a
    queue created on first enqueue gets (``queue_defaults``)."""

    strict: bool = False
    limits: ServerLimits = field(default_factory=ServerLimits)
    queue_defaults: QueueSettings = field(default_factory=QueueSettings)


async def publish(conn: asyncpg.Connection, schema: str, settings: AdmissionSettings, *,
                  replace: bool = True) -> None:
    """Write ``settings`` as ``schema``'s admission row (``replace=False``: only when there
    is none). A schema older than ``SQL_ENQUEUE_VERSION`` has no such table: nothing is
    written. Raises ``asyncpg.PostgresError`` as the statement does."""
    if await conn.fetchval("SELECT to_regclass($1)", f"{schema}.admission") is None:
        return
    conflict = "DO NOTHING"
    if replace:
        conflict = ("DO UPDATE SET strict = excluded.strict, limits = excluded.limits, "
                    "queue_defaults = excluded.queue_defaults, updated_at = excluded.updated_at")
    await conn.execute(f"INSERT INTO {schema}.admission (one, strict, limits, queue_defaults, updated_at) "
                       "VALUES (true, $1, $2::jsonb, $3, (extract(epoch FROM now()) * 1000000)::bigint) "
                       f"ON CONFLICT (one) {conflict}",
                       settings.strict, settings.limits.model_dump_json(), settings.queue_defaults.model_dump_json())


async def grant_app_role(conn: asyncpg.Connection, schema: str, role: str) -> bool:
    """Let ``role`` enqueue through ``schema``'s SQL functions and nothing else: USAGE on the
    schema and EXECUTE on ``APP_FUNCTIONS`` (SECURITY DEFINER: they run as their owner, the
    role that migrated), no privilege on any table. Creates the role (NOLOGIN) when it does
    not exist; returns True then. Raises ``ValueError`` for a name that is not a plain
    lower-case SQL name and ``asyncpg.PostgresError`` when PostgreSQL refuses."""
    if not ROLE_NAME.match(role):
        raise ValueError(f"--app-role {role!r} is not a plain lower-case SQL name")
    created = False
    async with conn.transaction():
        if await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role) is None:
            await conn.execute(f"CREATE ROLE {role} NOLOGIN")
            created = True
        await conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        for signature in APP_FUNCTIONS:
            await conn.execute(f"GRANT EXECUTE ON FUNCTION {schema}.{signature} TO {role}")
    return created
