"""Each driver read that a row type reads by name selects the columns of that type, named and
in its order (``sepp.storage.row_types`` and the drivers' own row types): adding a column to
a query without its type, or the other way round, fails here instead of shifting a
position somewhere in a driver."""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from typing import Any

from sepp.domain.outcomes import JobOutcome
from sepp.domain.records import JobRecord, NodeRecord, PeriodicRecord
from sepp.storage.base import Store
from sepp.storage.postgres.flow import FlowReadyRow
from sepp.storage.postgres.periodic import P as PG_P
from sepp.storage.postgres.sql import A as PG_A
from sepp.storage.postgres.sql import Q as PG_Q
from sepp.storage.postgres.store import PostgresStore
from sepp.storage.postgres.summaries import SummaryRow as PgSummaryRow
from sepp.storage.row_types import AckedRow, ExpiredRow, LeasedRow, LeaseLookup, QueueRow
from sepp.storage.sqlite.admin import SummaryRow as SQLiteSummaryRow
from sepp.storage.sqlite.outcomes import outcomes_sql
from sepp.storage.sqlite.periodic import P as SQLITE_P
from sepp.storage.sqlite.sql import A as SQLITE_A
from sepp.storage.sqlite.sql import Q as SQLITE_Q
from sepp.storage.sqlite.sql import ack_results_sql, ack_sql
from sepp.storage.sqlite.store import SQLiteStore
from sepp.storage.sqlite.sweeps import _DueRow, _KeyRow, _PurgeableRow

#: The SQLite reads and the row type each is read with.
SQLITE_READS: dict[str, tuple[str, type[tuple[Any, ...]]]] = {
    "ready_for_lease": (SQLITE_Q["ready_for_lease"], LeasedRow),
    "ready_for_lease_seqs": (SQLITE_Q["ready_for_lease_seqs"], LeasedRow),
    "settle_lookup": (SQLITE_Q["settle_lookup"], LeaseLookup),
    "expired_leases": (SQLITE_Q["expired_leases"], ExpiredRow),
    "get_job": (SQLITE_Q["get_job"], JobRecord),
    "job_outcomes": (outcomes_sql(2), JobOutcome),
    "ack_many_head": (ack_sql(2), AckedRow),
    "ack_many_results_head": (ack_results_sql(2), AckedRow),
    "load_queues": (SQLITE_Q["load_queues"], QueueRow),
    "get_queue": (SQLITE_Q["get_queue"], QueueRow),
    "job_summaries": (SQLITE_A["job_summaries"], SQLiteSummaryRow),
    "due_jobs": (SQLITE_Q["due_jobs"], _DueRow),
    "purgeable_jobs": (SQLITE_Q["purgeable_jobs"], _PurgeableRow),
    "expired_keys": (SQLITE_Q["expired_keys"], _KeyRow),
    "periodic load_all": (SQLITE_P["load_all"], PeriodicRecord),
}
#: The PostgreSQL reads and the row type each is read with.
POSTGRES_READS: dict[str, tuple[str, type[tuple[Any, ...]]]] = {
    "lease_ready": (PG_Q["lease_ready"], LeasedRow),
    "lease_within": (PG_Q["lease_within"], LeasedRow),
    "lease_seqs": (PG_Q["lease_seqs"], LeasedRow),
    "lease_seqs_spend": (PG_Q["lease_seqs_spend"], LeasedRow),
    "settle_lookup": (PG_Q["settle_lookup"], LeaseLookup),
    "expired_leases": (PG_Q["expired_leases"], ExpiredRow),
    "get_job": (PG_Q["get_job"], JobRecord),
    "job_outcomes": (PG_Q["job_outcomes"], JobOutcome),
    "ack_many": (PG_Q["ack_many"], AckedRow),
    "ack_many_results": (PG_Q["ack_many_results"], AckedRow),
    "load_queues": (PG_Q["load_queues"], QueueRow),
    "lock_queue": (PG_Q["lock_queue"], QueueRow),
    "nodes": (PG_Q["nodes"], NodeRecord),
    "flow_ready": (PG_Q["flow_ready"], FlowReadyRow),
    "job_summaries": (PG_A["job_summaries"], PgSummaryRow),
    "periodic load_all": (PG_P["load_all"], PeriodicRecord),
}


def _sqlite_columns(conn: sqlite3.Connection, sql: str) -> list[str]:
    """The column names of ``sql`` run with every parameter 0 (on an empty database)."""
    params: Any = defaultdict(int) if re.search(r"[:@$][a-z_]", sql) else []
    try:
        cur = conn.execute(sql, params)
    except sqlite3.ProgrammingError as exc:  # "… uses N, and there are 0 supplied": bind N zeros
        found = re.search(r"uses (\d+)", str(exc))
        assert found is not None, exc
        cur = conn.execute(sql, [0] * int(found[1]))
    names = [d[0] for d in cur.description]
    cur.close()
    return names


async def test_each_read_selects_the_columns_of_its_row_type(store: Store) -> None:
    wrong: dict[str, tuple[list[str], list[str]]] = {}  # read → (its columns, its type's fields)
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.path)
        try:
            for name, (sql, row_type) in SQLITE_READS.items():
                conn.execute("BEGIN")  # the writes among them (RETURNING) are rolled back
                try:
                    names = _sqlite_columns(conn, sql)
                finally:
                    conn.rollback()
                fields = list(row_type._fields)  # type: ignore[attr-defined]
                if names != fields:
                    wrong[name] = (names, fields)
        finally:
            conn.close()
    else:
        assert isinstance(store, PostgresStore)
        async with store.reads.reader().acquire() as conn:
            for name, (sql, row_type) in POSTGRES_READS.items():
                statement = await conn.prepare(sql)
                names = [a.name for a in statement.get_attributes()]
                fields = list(row_type._fields)  # type: ignore[attr-defined]
                if names != fields:
                    wrong[name] = (names, fields)
    assert not wrong, "\n".join(f"{name}: columns {cols} != fields {fields}" for name, (cols, fields) in wrong.items())
