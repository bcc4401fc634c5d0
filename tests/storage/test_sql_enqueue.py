"""Enqueue inside the application's own transaction: the schema's SQL functions
(migration 0014) against a real PostgreSQL, no server.

A job exists if and only if the caller's transaction commits (rollback, savepoint
rollback: nothing, no key held, no queue created); the row is the one a node writes (ids
that carry their seq, the queue's defaults, the extras blob as the wire message, the
custom-index entries as ``value_text``, the idempotency claim and its window); 32
transactions racing on one key make one job; strict mode refuses an undeclared queue; a
batch of 1,000 is one call; the wake-up NOTIFY goes out at commit only. The verdicts' parity
with the server's validator is tests/cluster/test_sql_enqueue_verdicts.py.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.backends import PG_TEST_DSN, fresh_schema

import sepp.postgres as sql_enqueue
from sepp import EnqueueAck, EnqueueRequest, Payload, RejectedError, Rejection, RejectionCode
from sepp.api.v1 import common_pb2 as pb
from sepp.limits import QueueSettings, ServerLimits
from sepp.quoting import clip, quote
from sepp.storage.postgres.admission import AdmissionSettings, grant_app_role, publish
from sepp.storage.postgres.ids import carried_seq
from sepp.storage.postgres.schema import migrate
from sepp.storage.search import value_text
from sepp.wire import custom_to_proto

pytestmark = pytest.mark.postgres_only(reason="the SQL enqueue functions are PostgreSQL's")

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A fresh schema migrated to the latest version (dropped afterwards)."""
    name = fresh_schema()
    conn = await asyncpg.connect(PG_TEST_DSN)
    try:
        await migrate(conn, name)
        yield name
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        await conn.close()


@pytest.fixture
async def conn(schema: str) -> AsyncIterator[asyncpg.Connection]:
    """An application's connection: search_path public, nothing of sepp's on it."""
    c = await asyncpg.connect(PG_TEST_DSN)
    try:
        yield c
    finally:
        await c.close()


async def _count(c: asyncpg.Connection, schema: str, table: str) -> int:
    return int(await c.fetchval(f"SELECT count(*) FROM {schema}.{table}"))


async def test_a_committed_job_is_the_row_a_node_writes(schema: str, conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        job_id, dedup = await conn.fetchrow(
            f"SELECT * FROM {schema}.enqueue('emails', 'welcome', '\\x7b7d'::bytea, 'application/json', "
            """'{"user": 42, "ratio": {"float": 1.0}, "big": 1e15, "vip": true, "locale": "en"}', """
            f"idempotency_key => 'k1', trace_context => '{{\"traceparent\": \"{TRACEPARENT}\"}}')")
    assert dedup is False
    row = await conn.fetchrow(f"SELECT * FROM {schema}.jobs")
    raw = bytes(row["id"])
    assert raw == job_id.bytes and carried_seq(raw) == row["seq"]  # a native id: it carries its seq
    assert job_id.version == 7 and abs(int.from_bytes(raw[:6], "big") - time.time() * 1000) < 60_000
    defaults = QueueSettings()
    assert (row["queue"], row["job_type"], row["state"], row["priority"], row["max_attempts"], row["attempt"]) == \
        ("emails", "welcome", 2, defaults.default_priority, defaults.default_max_attempts, 0)
    assert (bytes(row["payload"]), row["encoding"], row["idempotency_key"]) == (b"{}", "application/json", "k1")
    assert row["run_at"] == row["enqueued_at"] and row["history"] is None
    extras = pb.EnqueueRequest.FromString(bytes(row["extras"]))
    want: dict[str, str | int | float | bool] = {"user": 42, "ratio": 1.0, "big": 10**15, "vip": True, "locale": "en"}
    assert dict(extras.custom) == {k: custom_to_proto(v) for k, v in want.items()}
    assert dict(extras.trace_context) == {"traceparent": TRACEPARENT}
    entries = {(r["key"], r["value"]) for r in await conn.fetch(f"SELECT key, value FROM {schema}.job_custom")}
    assert entries == {(k, value_text(v)) for k, v in want.items()}
    key = await conn.fetchrow(f"SELECT * FROM {schema}.idempotency")
    assert bytes(key["job_id"]) == raw and key["expires_at"] == row["enqueued_at"] + int(defaults.dedup_window * 1e6)
    queue = await conn.fetchrow(f"SELECT * FROM {schema}.queues")
    assert queue["name"] == "emails" and queue["declared"] is False
    assert QueueSettings.model_validate_json(queue["settings"]) == defaults


async def test_rollback_leaves_no_job_no_key_and_no_queue(schema: str, conn: asyncpg.Connection) -> None:
    tx = conn.transaction()
    await tx.start()
    await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('fresh', 't', idempotency_key => 'k', "
                        "custom => '{\"a\": 1}')")
    await tx.rollback()
    for table in ("jobs", "idempotency", "queues", "job_custom", "queue_throughput"):
        assert await _count(conn, schema, table) == 0, table
    # The key was never held: the next enqueue with it makes a job.
    _, dedup = await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('fresh', 't', idempotency_key => 'k')")
    assert dedup is False


async def test_a_savepoint_rolled_back_takes_its_jobs_and_keys_with_it(schema: str, conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        first, _ = await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('q', 'kept')")
        with pytest.raises(ZeroDivisionError):
            async with conn.transaction():  # a savepoint
                await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('q', 'dropped', idempotency_key => 'k')")
                raise ZeroDivisionError
        second, dedup = await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('q', 'kept', idempotency_key => 'k')")
    assert dedup is False
    rows = await conn.fetch(f"SELECT id, job_type FROM {schema}.jobs ORDER BY seq")
    assert [(bytes(r["id"]), r["job_type"]) for r in rows] == [(first.bytes, "kept"), (second.bytes, "kept")]


async def test_a_refused_job_raises_its_code_and_stores_nothing(schema: str, conn: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.PostgresError) as caught:
        async with conn.transaction():
            await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('q', 'ok')")
            await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('q', 't', '\\x00'::bytea, priority => 10)")
    exc = caught.value
    assert exc.sqlstate == "SE001"
    assert exc.args[0] == "InvalidArgument: priority must be between 0 and 9"
    assert json.loads(exc.detail) == {"code": 1, "name": "InvalidArgument", "reason": "INVALID_ARGUMENT",
                                      "message": "priority must be between 0 and 9", "field": "priority",
                                      "limit": 9, "actual": 10}
    assert await _count(conn, schema, "jobs") == 0
    with pytest.raises(asyncpg.PostgresError) as batch:
        await conn.fetch(f"SELECT * FROM {schema}.enqueue_batch(ARRAY['q', 'q', ''], ARRAY['t', 't', 't'])")
    assert batch.value.sqlstate == "SE002" and json.loads(batch.value.detail)["index"] == 2
    assert batch.value.args[0] == "QueueNameInvalid: queue name is empty (job 2 of the batch)"


async def test_32_transactions_racing_on_one_key_make_one_job(schema: str) -> None:
    conns = [await asyncpg.connect(PG_TEST_DSN) for _ in range(32)]
    start = asyncio.Event()

    async def one(c: asyncpg.Connection) -> tuple[Any, bool]:
        await start.wait()
        async with c.transaction():
            job_id, dedup = await c.fetchrow(f"SELECT * FROM {schema}.enqueue('race', 't', idempotency_key => 'one')")
        return job_id, dedup

    try:
        tasks = [asyncio.create_task(one(c)) for c in conns]
        start.set()
        results = await asyncio.gather(*tasks)
    finally:
        for c in conns:
            await c.close()
    assert len({job_id for job_id, _ in results}) == 1
    assert sorted(dedup for _, dedup in results) == [False] + [True] * 31
    check = await asyncpg.connect(PG_TEST_DSN)
    try:
        assert await _count(check, schema, "jobs") == 1
    finally:
        await check.close()


async def test_strict_mode_refuses_an_undeclared_queue(schema: str, conn: asyncpg.Connection) -> None:
    await publish(conn, schema, AdmissionSettings(strict=True))
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('nope', 't')")
    assert caught.value.sqlstate == "SE004"
    assert caught.value.args[0] == "UnknownQueue: queue 'nope' is not declared (strict mode)"
    settings = QueueSettings(default_priority=8, default_max_attempts=3)
    await conn.execute(f"INSERT INTO {schema}.queues VALUES ('declared', $1, false, true, 0, 0)",
                       settings.model_dump_json())
    await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('declared', 't')")
    assert tuple(await conn.fetchrow(f"SELECT priority, max_attempts FROM {schema}.jobs")) == (8, 3)
    assert await _count(conn, schema, "queues") == 1


async def test_a_new_queue_gets_the_queue_defaults_limits(schema: str, conn: asyncpg.Connection) -> None:
    small = QueueSettings.model_validate({"limits": {"max_payload_bytes": 4}, "default_priority": 2})
    await publish(conn, schema, AdmissionSettings(queue_defaults=small))
    rows = await conn.fetch(f"SELECT * FROM {schema}.enqueue_batch(ARRAY['new', 'new'], ARRAY['t', 't'], "
                            "ARRAY['\\x01020304'::bytea, NULL])")
    assert len(rows) == 2
    assert [r[0] for r in await conn.fetch(f"SELECT priority FROM {schema}.jobs")] == [2, 2]
    for call in (f"SELECT * FROM {schema}.enqueue('new', 't', '\\x0102030405'::bytea)",
                 f"SELECT * FROM {schema}.enqueue('other', 't', '\\x0102030405'::bytea)",
                 f"SELECT * FROM {schema}.enqueue_batch(ARRAY['x', 'x'], ARRAY['t', 't'], "
                 "ARRAY[NULL, '\\x0102030405'::bytea])"):
        with pytest.raises(asyncpg.PostgresError) as caught:
            await conn.fetch(call)
        detail = json.loads(caught.value.detail)
        assert (caught.value.sqlstate, detail["limit"], detail["actual"]) == ("SE005", 4, 5), call


async def test_max_queues_counts_the_queues_a_batch_creates(schema: str, conn: asyncpg.Connection) -> None:
    await publish(conn, schema, AdmissionSettings(limits=ServerLimits(max_queues=2)))
    await conn.fetch(f"SELECT * FROM {schema}.enqueue_batch(ARRAY['a', 'b', 'a'], ARRAY['t', 't', 't'])")
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.fetch(f"SELECT * FROM {schema}.enqueue('c', 't')")
    detail = json.loads(caught.value.detail)
    assert (caught.value.sqlstate, detail["limit"], detail["actual"]) == ("SE004", 2, 2)


async def test_a_batch_of_1000_is_one_call_in_order(schema: str, conn: asyncpg.Connection) -> None:
    n = 1000
    started = time.perf_counter()
    async with conn.transaction():
        rows = await conn.fetch(f"SELECT * FROM {schema}.enqueue_batch($1::text[], $2::text[], $3::bytea[])",
                                ["bulk"] * n, ["t"] * n, [i.to_bytes(4, "big") for i in range(n)])
    took = time.perf_counter() - started
    print(f"1,000 jobs in one enqueue_batch call: {took * 1000:.1f} ms")
    assert [r["idx"] for r in rows] == list(range(n)) and not any(r["deduplicated"] for r in rows)
    stored = await conn.fetch(f"SELECT id, seq, payload FROM {schema}.jobs ORDER BY seq")
    assert [bytes(r["id"]) for r in stored] == [r["job_id"].bytes for r in rows]
    assert [int.from_bytes(r["payload"], "big") for r in stored] == list(range(n))
    assert sorted(bytes(r["id"]) for r in stored) == [bytes(r["id"]) for r in stored]  # ids sort as seqs


async def test_the_wake_up_goes_out_at_commit_only(schema: str, conn: asyncpg.Connection) -> None:
    listener = await asyncpg.connect(PG_TEST_DSN)
    got: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(f"sepp_{schema}", lambda *args: got.put_nowait(args[3]))
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('w', 't')")
        await tx.rollback()
        async with conn.transaction():
            await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('w', 't')")
            await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('later', 't', scheduled_at => now() + interval '1h')")
        messages = [json.loads(await asyncio.wait_for(got.get(), 10)) for _ in range(2)]
        # The rolled-back transaction's never came (notifications arrive in commit order):
        # the first ones are the commit's, one per call, which created the queues (k: the
        # nodes reload them), made jobs of w ready, stored one job each ("c") and name the
        # block of seqs holding it ("s": the nodes' live enqueued events read it).
        seqs = [r["seq"] for r in await conn.fetch(f"SELECT seq FROM {schema}.jobs ORDER BY seq")]
        assert messages == [{"o": "sql", "q": ["w"], "k": True, "c": {"w": 1}, "s": [[seqs[0], 1]]},
                            {"o": "sql", "q": [], "k": True, "c": {"later": 1}, "s": [[seqs[1], 1]]}]
    finally:
        await listener.close()


async def _notices(schema: str, conn: asyncpg.Connection, sql: str) -> list[str]:
    """The payloads one committed call of ``sql`` sent on the nodes' channel."""
    listener = await asyncpg.connect(PG_TEST_DSN)
    got: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(f"sepp_{schema}", lambda *args: got.put_nowait(args[3]))
    try:
        async with conn.transaction():
            await conn.fetch(sql)
            await conn.execute(f"SELECT pg_notify('sepp_{schema}', 'end')")  # sent after the call's
        out = []
        while (payload := await asyncio.wait_for(got.get(), 10)) != "end":
            out.append(payload)
        return out
    finally:
        await listener.close()


async def test_the_notification_names_every_block_and_queue_within_the_payload_limit(
        schema: str, conn: asyncpg.Connection) -> None:
    # 1,025 jobs: two blocks of seqs, the second holding one job; deduplicated jobs are not counted.
    payloads = await _notices(schema, conn, f"SELECT * FROM {schema}.enqueue_batch("
                                            "array_fill('b'::text, ARRAY[1025]), array_fill('t'::text, ARRAY[1025]))")
    [one] = [json.loads(p) for p in payloads]
    first = await conn.fetchval(f"SELECT min(seq) FROM {schema}.jobs")
    assert one["c"] == {"b": 1025} and [n for _s, n in one["s"]] == [1024, 1] and one["s"][0][0] == first
    payloads = await _notices(schema, conn, f"SELECT * FROM {schema}.enqueue_batch(ARRAY['b', 'b'], ARRAY['t', 't'], "
                                            "idempotency_keys => ARRAY['k', 'k'])")
    assert [json.loads(p)["c"] for p in payloads] == [{"b": 1}]
    # 300 queues with 120-byte names: over one payload's 8,000 bytes, split over several, each
    # under the limit, together naming every queue once (the queue rows are created: k once).
    names = [f"{i:03d}" + "q" * 117 for i in range(300)]
    payloads = await _notices(schema, conn, f"SELECT * FROM {schema}.enqueue_batch($${{{','.join(names)}}}$$::text[], "
                                            "array_fill('t'::text, ARRAY[300]))")
    assert len(payloads) > 1 and max(len(p.encode()) for p in payloads) < 8000
    parsed = [json.loads(p) for p in payloads]
    counts = {q: n for p in parsed for q, n in p["c"].items()}
    assert counts == dict.fromkeys(names, 1) and sorted(q for p in parsed for q in p["q"]) == names
    assert [p["k"] for p in parsed] == [True] + [False] * (len(parsed) - 1)
    assert sum(n for p in parsed for _s, n in p["s"]) == 300


_VALUES = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**63), 2**63 - 1) \
    | st.text(st.characters(codec="utf-8", blacklist_characters="\x00"), max_size=8) | st.booleans() \
    | st.sampled_from([1e15, 1e16, 1000000000000000.1, 1e-5, 1e-4, -0.0, 1.5e308, 1.7976931348623157e308, 5e-324])


@settings(max_examples=40, deadline=None, database=None)
@given(values=st.lists(_VALUES, min_size=1, max_size=50))
def test_the_index_text_of_a_custom_value_is_value_text(values: list[Any]) -> None:
    asyncio.run(_index_texts(values))


_SCHEMA_FOR_TEXT: list[str] = []


def _typed(value: Any) -> str:
    if isinstance(value, float):
        return json.dumps({"float": repr(value)})  # as the helpers send a float
    return json.dumps({"bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string": value})


async def _index_texts(values: list[Any]) -> None:
    c = await asyncpg.connect(PG_TEST_DSN)
    try:
        if not _SCHEMA_FOR_TEXT:
            name = fresh_schema()
            await migrate(c, name)
            _SCHEMA_FOR_TEXT.append(name)
        await c.execute(f"SET search_path = {_SCHEMA_FOR_TEXT[0]}")
        texts = await c.fetchval("SELECT array_agg(_custom_text(v::jsonb) ORDER BY o) "
                                 "FROM unnest($1::text[]) WITH ORDINALITY AS t(v, o)", [_typed(v) for v in values])
        assert texts == [value_text(v) for v in values]
    finally:
        await c.close()


def test_the_psycopg_helper_validates_locally_and_keeps_the_transaction(schema: str) -> None:
    with psycopg.connect(PG_TEST_DSN) as c:
        ok = sql_enqueue.enqueue(c, EnqueueRequest("emails", "a", payload=Payload.json({"x": 1}),
                                                   custom={"n": math.pi}), schema=schema)
        refused = sql_enqueue.enqueue(c, EnqueueRequest("emails", "b", priority=12), schema=schema)
        results = sql_enqueue.enqueue_batch(c, [EnqueueRequest("emails", "c"), EnqueueRequest("emails", ""),
                                                EnqueueRequest("emails", "d", idempotency_key="k"),
                                                EnqueueRequest("emails", "e", idempotency_key="k")], schema=schema)
        c.commit()  # the refusals left the transaction usable
        assert isinstance(ok, EnqueueAck) and not ok.deduplicated
        assert isinstance(refused, Rejection) and refused.code is RejectionCode.INVALID_ARGUMENT
        assert [type(r).__name__ for r in results] == ["EnqueueAck", "Rejection", "EnqueueAck", "EnqueueAck"]
        assert isinstance(results[3], EnqueueAck) and results[3].deduplicated
        assert results[3].job_id == results[2].job_id  # type: ignore[union-attr]
        with pytest.raises(RejectedError) as caught:  # unchecked: the SQL function refuses it
            sql_enqueue.enqueue(c, EnqueueRequest("emails", "b", priority=12), schema=schema, validate_locally=False)
        assert caught.value.rejection == refused
        c.rollback()
        with c.cursor() as cur:
            cur.execute(f"SELECT job_type FROM {schema}.jobs ORDER BY seq")
            assert [r[0] for r in cur.fetchall()] == ["a", "c", "d"]


async def test_the_async_helpers_take_psycopg_and_asyncpg(schema: str, conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        one = await sql_enqueue.enqueue(conn, EnqueueRequest("q", "asyncpg"), schema=schema)
    async with await psycopg.AsyncConnection.connect(PG_TEST_DSN) as ac:
        many = await sql_enqueue.enqueue_batch(ac, [EnqueueRequest("q", "psycopg")] * 3, schema=schema)
        await ac.rollback()
    assert isinstance(one, EnqueueAck) and len(many) == 3
    assert [r["job_type"] for r in await conn.fetch(f"SELECT job_type FROM {schema}.jobs")] == ["asyncpg"]


# Letters, marks, numbers, punctuation, symbols, spaces and the escaped controls: the SQL
# repr knows no Unicode database, so an unassigned or private-use code point, or a format
# character other than those it lists, is shown as itself (docs/decisions.md).
_SHOWN = st.characters(whitelist_categories=("L", "M", "N", "P", "S", "Zs", "Cc"), blacklist_characters="\x00")


@settings(max_examples=30, deadline=None, database=None)
@given(texts=st.lists(st.text(_SHOWN, max_size=80)
                      | st.sampled_from(["'", '"', "'\"", "a\\b", "\t\n\r\x7f\x85\xa0\xad",
                                       "\u1680\u2000\u200a\u200b\u202f\u205f\u2060\u2066\u3000\ufeff\u061c",
                                       "é" * 101, "x" * 201]),
                      min_size=1, max_size=40))
def test_a_value_quoted_in_a_message_reads_as_quoting_quote(texts: list[str]) -> None:
    asyncio.run(_quotes(texts))


async def _quotes(texts: list[str]) -> None:
    c = await asyncpg.connect(PG_TEST_DSN)
    try:
        if not _SCHEMA_FOR_TEXT:
            name = fresh_schema()
            await migrate(c, name)
            _SCHEMA_FOR_TEXT.append(name)
        await c.execute(f"SET search_path = {_SCHEMA_FOR_TEXT[0]}")
        got = await c.fetchrow("SELECT array_agg(_quote(t) ORDER BY o), array_agg(_clip(t) ORDER BY o) "
                               "FROM unnest($1::text[]) WITH ORDINALITY AS u(t, o)", texts)
        assert (got[0], got[1]) == ([quote(t) for t in texts], [clip(t) for t in texts])
    finally:
        await c.close()


async def test_the_app_role_can_enqueue_and_touch_nothing_else(schema: str, conn: asyncpg.Connection) -> None:
    role = f"{schema}_app"
    try:
        assert await grant_app_role(conn, schema, role) is True  # created NOLOGIN
        assert await grant_app_role(conn, schema, role) is False  # idempotent
        async with conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {role}")
            # A table of the caller's own that would shadow sepp's without a fixed search_path.
            await conn.execute("CREATE TEMP TABLE jobs (id bytea) ON COMMIT DROP")
            _, dedup = await conn.fetchrow(f"SELECT * FROM {schema}.enqueue('app', 't')")
            rows = await conn.fetch(f"SELECT * FROM {schema}.enqueue_batch(ARRAY['app'], ARRAY['u'])")
            limits = json.loads(await conn.fetchval(f"SELECT {schema}.admission_limits(ARRAY['app'])"))
            assert dedup is False and len(rows) == 1 and set(limits["queues"]) == {"app"}
            assert await conn.fetchval("SELECT count(*) FROM pg_temp.jobs") == 0
        for statement in (f"SELECT * FROM {schema}.jobs", f"UPDATE {schema}.jobs SET priority = 9",
                          f"DELETE FROM {schema}.idempotency", f"SELECT * FROM {schema}.admission",
                          f"INSERT INTO {schema}.queues VALUES ('x', '{{}}', false, true, 0, 0)",
                          f"SELECT * FROM {schema}._enqueue(ARRAY['q'], ARRAY['t'], NULL, NULL, NULL, NULL, NULL, "
                          "NULL, NULL, NULL, false)",
                          f"SELECT {schema}._check('q', 't', 0, '', '{{}}', NULL, NULL, NULL, '', '{{}}', '{{}}', "
                          "NULL, true, false, 0, 0)"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL ROLE {role}")
                    await conn.execute(statement)
        assert await _count(conn, schema, "jobs") == 2
    finally:
        await conn.execute(f"DROP OWNED BY {role}")
        await conn.execute(f"DROP ROLE IF EXISTS {role}")
