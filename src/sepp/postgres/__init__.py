"""Enqueue sepp jobs inside the application's own PostgreSQL transaction
(docs/enqueue-in-transaction.md).

``enqueue(conn, request)`` and ``enqueue_batch(conn, requests)`` take the client's
``EnqueueRequest`` objects and return its ``EnqueueAck`` / ``Rejection`` values, through the
schema's SQL functions ``enqueue`` and ``enqueue_batch`` on the connection given — so the
jobs exist if and only if the caller's transaction commits. ``conn`` is any of:

* a psycopg 3 ``Connection`` or ``Cursor`` (also what SQLAlchemy's
  ``session.connection().connection.driver_connection`` is), or any DB-API cursor with
  psycopg's ``%(name)s`` parameters (Django's ``connection.cursor()``): the call returns the
  result;
* a psycopg 3 ``AsyncConnection`` / ``AsyncCursor`` or an asyncpg ``Connection``: the call
  returns an awaitable of it.

Each request is validated first, with the limits the schema holds (one read,
``admission_limits``), by the validator the server runs: a job that would be refused comes
back as its ``Rejection`` and nothing is sent, so the caller's transaction stays usable.
A job refused by the SQL function itself (settings changed in between) raises
``RejectedError``; PostgreSQL has aborted the transaction then.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.errors import RejectedError
from sepp.postgres._params import (
    SQLSTATE_CLASS,
    ack,
    named,
    pyformat,
    rejection_of_detail,
    sql_args,
    sql_columns,
    statements,
    validator_of,
)
from sepp.request import EnqueueAck, EnqueueRequest, Rejection

#: What ``enqueue`` returns for one job.
Result = EnqueueAck | Rejection


def _is_async(conn: Any) -> bool:
    module = type(conn).__module__
    return module.startswith("asyncpg") or type(conn).__name__.startswith("Async")


def _is_asyncpg(conn: Any) -> bool:
    return type(conn).__module__.startswith("asyncpg")


def _refused(exc: BaseException) -> RejectedError | None:
    """The ``RejectedError`` of a driver error raised by the SQL function, or None."""
    state = getattr(exc, "sqlstate", None)
    if not isinstance(state, str) or not state.startswith(SQLSTATE_CLASS):
        return None
    diag = getattr(exc, "diag", None)
    detail = getattr(diag, "message_detail", None) if diag is not None else getattr(exc, "detail", None)
    rejection = rejection_of_detail(detail)
    return None if rejection is None else RejectedError(rejection)


def _verdicts(reqs: Sequence[EnqueueRequest], limits: Any) -> tuple[list[pb.EnqueueRequest], list[Result | None]]:
    """The wire requests and each one's local verdict (None: valid)."""
    check = validator_of(limits).validate
    now_ns = time.time_ns()
    wires = [r.to_proto() for r in reqs]
    out: list[Result | None] = []
    for w in wires:
        rej = check(w, now_ns)
        out.append(None if rej is None else Rejection.from_proto(rej))
    return wires, out


# ------------------------------------------------------------------ sync (psycopg, DB-API)


def _run_sync(conn: Any, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    query = pyformat(sql)
    try:
        if callable(getattr(conn, "cursor", None)):  # a connection (Django's cursor has a .cursor attribute)
            with conn.cursor() as cur:
                cur.execute(query, named(args))
                return list(cur.fetchall())
        conn.execute(query, named(args))
        return list(conn.fetchall())
    except Exception as exc:
        refused = _refused(exc)
        if refused is not None:
            raise refused from exc
        raise


def _enqueue_sync(conn: Any, reqs: Sequence[EnqueueRequest], schema: str, validate: bool) -> list[Result]:
    one, many, limits_sql = statements(schema)
    results: list[Result | None]
    if validate:
        (limits,), = _run_sync(conn, limits_sql, [sorted({r.queue for r in reqs})])
        wires, results = _verdicts(reqs, limits)
    else:
        wires, results = [r.to_proto() for r in reqs], [None] * len(reqs)
    todo = [i for i, r in enumerate(results) if r is None]
    if len(reqs) == 1 and todo:
        rows = _run_sync(conn, one, sql_args(wires[0]))
    elif todo:
        rows = _run_sync(conn, many, sql_columns([wires[i] for i in todo]))
    else:
        rows = []
    for i, row in zip(todo, rows, strict=True):
        results[i] = ack(row)
    return [r for r in results if r is not None]


# ------------------------------------------------------------------ async (psycopg, asyncpg)


async def _run_async(conn: Any, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    try:
        if _is_asyncpg(conn):
            return [tuple(r) for r in await conn.fetch(sql, *args)]
        query = pyformat(sql)
        if callable(getattr(conn, "cursor", None)):
            async with conn.cursor() as cur:
                await cur.execute(query, named(args))
                return list(await cur.fetchall())
        await conn.execute(query, named(args))
        return list(await conn.fetchall())
    except Exception as exc:
        refused = _refused(exc)
        if refused is not None:
            raise refused from exc
        raise


async def _enqueue_async(conn: Any, reqs: Sequence[EnqueueRequest], schema: str, validate: bool) -> list[Result]:
    one, many, limits_sql = statements(schema)
    results: list[Result | None]
    if validate:
        (limits,), = await _run_async(conn, limits_sql, [sorted({r.queue for r in reqs})])
        wires, results = _verdicts(reqs, limits)
    else:
        wires, results = [r.to_proto() for r in reqs], [None] * len(reqs)
    todo = [i for i, r in enumerate(results) if r is None]
    if len(reqs) == 1 and todo:
        rows = await _run_async(conn, one, sql_args(wires[0]))
    elif todo:
        rows = await _run_async(conn, many, sql_columns([wires[i] for i in todo]))
    else:
        rows = []
    for i, row in zip(todo, rows, strict=True):
        results[i] = ack(row)
    return [r for r in results if r is not None]


async def _first(results: Awaitable[list[Result]]) -> Result:
    return (await results)[0]


# ------------------------------------------------------------------ public


def enqueue(conn: Any, request: EnqueueRequest, *, schema: str = "sepp", validate_locally: bool = True) -> Any:
    """Enqueue ``request`` in ``conn``'s current transaction (see the module docstring for
    what ``conn`` may be). Returns the job's ``EnqueueAck`` (``deduplicated`` when its
    idempotency key is held) or its ``Rejection`` — directly for a synchronous connection,
    as an awaitable for an asynchronous one. ``schema``: sepp's schema (``[postgres]
    schema``); ``validate_locally=False`` sends the job unchecked (the SQL function checks
    it all the same, raising on a refusal).

    Raises ``RejectedError`` when the SQL function refuses the job (the transaction is then
    aborted), ``ValueError`` for a schema name that is not a plain lower-case SQL name, and
    the driver's errors (a lost connection, a missing function: ``sepp migrate``)."""
    if _is_async(conn):
        return _first(_enqueue_async(conn, [request], schema, validate_locally))
    return _enqueue_sync(conn, [request], schema, validate_locally)[0]


def enqueue_batch(conn: Any, requests: Sequence[EnqueueRequest], *, schema: str = "sepp",
                  validate_locally: bool = True) -> Any:
    """Enqueue ``requests`` in ``conn``'s current transaction with one call of the schema's
    ``enqueue_batch`` (any number: the SQL function has no batch cap). Returns one
    ``EnqueueAck`` or ``Rejection`` per request, in order — a job refused locally is left out
    and the others are enqueued, as the client's ``enqueue_batch`` does — directly for a
    synchronous connection, as an awaitable for an asynchronous one. Raises as ``enqueue``."""
    if _is_async(conn):
        return _enqueue_async(conn, list(requests), schema, validate_locally)
    return _enqueue_sync(conn, list(requests), schema, validate_locally)


__all__ = ["Result", "enqueue", "enqueue_batch"]
