"""The SQL side of the in-transaction enqueue helpers: the statements, a wire
``EnqueueRequest`` as the SQL functions' arguments, the local validator built from
``admission_limits``, and a refusal raised by the function back into a ``Rejection``.

Statements are written once with ``$n`` placeholders (asyncpg) and turned into psycopg's
named ``%(pN)s`` form by ``pyformat`` (a placeholder may appear twice).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.limits import QueueLimits, QueueSettings, ServerLimits, clamp_settings
from sepp.rejections import RejectionCode
from sepp.request import EnqueueAck, Rejection
from sepp.validation import QueueRefused, Validator

#: What ``schema=`` accepts: a plain lower-case SQL name, as ``[postgres] schema``.
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: The SQLSTATE class of a job the SQL functions refuse (``SE0NN``, NN the code's number).
SQLSTATE_CLASS = "SE"

_TS = "CASE WHEN {s}::bigint IS NULL THEN NULL ELSE to_timestamp({s}::bigint) + {u}::int * interval '1 microsecond' END"
_ONE = ("SELECT job_id, deduplicated FROM {schema}.enqueue($1::text, $2::text, $3::bytea, $4::text, $5::jsonb, "
        "$6::int, $7::int, " + _TS.format(s="$8", u="$9") + ", $10::text, $11::jsonb)")
_MANY = ("SELECT e.job_id, e.deduplicated FROM {schema}.enqueue_batch($1::text[], $2::text[], $3::bytea[], $4::text[], "
         "$5::text[]::jsonb[], $6::int[], $7::int[], (SELECT array_agg(" + _TS.format(s="t.s", u="t.u")
         + " ORDER BY t.o) FROM unnest($8::bigint[], $9::int[]) WITH ORDINALITY AS t(s, u, o)), $10::text[], "
         "$11::text[]::jsonb[]) e ORDER BY e.idx")
_LIMITS = "SELECT {schema}.admission_limits($1::text[])"
_PLACEHOLDER = re.compile(r"\$(\d+)")


def statements(schema: str) -> tuple[str, str, str]:
    """(one job, a batch, the limits) for ``schema``. Raises ``ValueError`` for a name that
    is not a plain lower-case SQL name."""
    if not SCHEMA_NAME.match(schema):
        raise ValueError(f"schema {schema!r} is not a plain lower-case SQL name")
    return _ONE.format(schema=schema), _MANY.format(schema=schema), _LIMITS.format(schema=schema)


def pyformat(sql: str) -> str:
    """``sql`` with ``$n`` as ``%(pn)s`` (psycopg, and a DB-API cursor such as Django's)."""
    return _PLACEHOLDER.sub(lambda m: f"%(p{m[1]})s", sql.replace("%", "%%"))


def named(args: Sequence[Any]) -> dict[str, Any]:
    """Positional arguments as ``pyformat``'s names."""
    return {f"p{i}": a for i, a in enumerate(args, 1)}


def _custom_json(value: pb.CustomValue) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return {"string": value.string_value}
    if kind == "int_value":
        return {"int": value.int_value}
    if kind == "bool_value":
        return {"bool": value.bool_value}
    if kind == "float_value":
        return {"float": repr(value.float_value)}  # text: exact, and -0.0, nan and ±inf too
    return None


def sql_args(req: pb.EnqueueRequest) -> tuple[Any, ...]:
    """The 11 arguments of the one-job statement for ``req``: queue, job type, payload data,
    encoding, custom (JSON text, each value an object naming its kind: ``{"int": 42}``,
    ``{"float": "1.5"}``),
    priority, max_attempts (None when unset), scheduled_at as (Unix seconds, µs; None when
    unset; nanoseconds below the µs are dropped), idempotency key (None when empty) and
    trace context (JSON text)."""
    has = req.HasField
    secs = micros = None
    if has("scheduled_at"):
        ts = req.scheduled_at
        secs, micros = ts.seconds, ts.nanos // 1000
    custom = {k: _custom_json(v) for k, v in req.custom.items()}
    return (req.queue, req.job_type, req.payload.data, req.payload.encoding, json.dumps(custom),
            req.priority if has("priority") else None, req.max_attempts if has("max_attempts") else None,
            secs, micros, req.idempotency_key or None, json.dumps(dict(req.trace_context)))


def sql_columns(reqs: Sequence[pb.EnqueueRequest]) -> tuple[list[Any], ...]:
    """The batch statement's 11 arrays for ``reqs`` (``sql_args`` by column)."""
    rows = [sql_args(r) for r in reqs]
    return tuple(list(col) for col in zip(*rows, strict=True))


def ack(row: Sequence[Any]) -> EnqueueAck:
    """An ``EnqueueAck`` of a (job_id uuid, deduplicated) result row."""
    return EnqueueAck(str(row[0]), bool(row[1]))


def rejection_of_detail(detail: str | None) -> Rejection | None:
    """The ``Rejection`` an ``SE0NN`` error carries in its DETAIL (JSON), or None when the
    detail is not one (an error of another kind)."""
    try:
        data = json.loads(detail or "")
        code = RejectionCode.from_wire(int(data["code"]))
    except (ValueError, TypeError, KeyError):
        return None
    return Rejection(code, str(data.get("message", "")), str(data.get("field", "")),
                     _int_or_none(data.get("limit")), _int_or_none(data.get("actual")))


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def validator_of(limits: Mapping[str, Any] | str) -> Validator:
    """The ``Validator`` a node would check with, from ``admission_limits``' answer (a dict,
    or its JSON text): strict mode, the server-wide limits, each named queue's stored settings
    (clamped as a node reads them), the queue defaults for a queue created on first enqueue,
    and the queue count against ``max_queues`` (one validator per call: the new queues it
    admits count against the limit for the next)."""
    data = json.loads(limits) if isinstance(limits, str) else limits
    server = ServerLimits.model_validate(data["limits"])
    strict = bool(data["strict"])
    queues: dict[str, QueueLimits] = {name: clamp_settings(s, server.max_encoding_bytes)[0].limits
                                      for name, s in data["queues"].items()}
    defaults = clamp_settings(data["queue_defaults"], server.max_encoding_bytes)[0] \
        if data.get("queue_defaults") is not None else QueueSettings()
    count = int(data["queue_count"])
    admitted: set[str] = set()  # new queues of this call: each counts for the next (as a node)

    def lookup(name: str) -> QueueLimits | QueueRefused | None:
        found = queues.get(name)
        if found is not None:
            return found
        if strict:
            return None
        if name not in admitted:
            if count + len(admitted) >= server.max_queues:
                return QueueRefused(f"the server's queue limit is reached (limits.max_queues = {server.max_queues}): "
                                    "delete unused queues (sepp queues delete NAME) or declare this one "
                                    "after raising [limits] max_queues in the server's config "
                                    "(SEPP_LIMITS__MAX_QUEUES)", server.max_queues, count + len(admitted))
            admitted.add(name)
        return defaults.limits

    return Validator(server, lookup)
