"""SQL text of the SQLite backend: the named queries (``queries.sql``, ``admin.sql``) and the builders of
the statements whose text depends on a batch (multi-row INSERTs, batched acks).

The builders run on the event loop (docs/decisions.md "The writer runs SQL, the event loop
builds"); their caches hold one text per batch shape, matched by the writer connection's
statement cache (``schema.connect_writer``: ``cached_statements=256``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sepp.domain.records import JobRow
from sepp.storage._sql import load_queries

#: The named queries of ``queries.sql``, by name.
Q = load_queries("sepp.storage.sqlite")
#: The named queries of ``admin.sql`` (the admin listings, counts and writes), by name.
A = load_queries("sepp.storage.sqlite", "admin.sql")
for _statement in ("search_match", "search_range"):
    A[_statement] = A[_statement].replace("{filters}", A["search_filters"])

#: Rows per multi-row INSERT: at most 12 parameters each, far below SQLite's 32,766 limit.
INSERT_CHUNK = 512
#: JobRow columns that are usually the same for every row of a batch (all but id and
#: payload): bound once per statement when they are.
_SHAREABLE = (1, 2, 3, 4, 5, 6, 7, 9, 10, 11)
#: A multi-row INSERT: (rows, which _SHAREABLE columns are bound once).
InsertKey = tuple[int, tuple[bool, ...]]
_INSERT_SQL: dict[InsertKey, str] = {}


def insert_sql(n: int, shared: tuple[bool, ...] = (False,) * len(_SHAREABLE)) -> str:
    """The INSERT of ``n`` rows with numbered parameters: each column in ``_SHAREABLE``
    whose ``shared`` flag is set is one parameter for all rows (?1, ?2, … in that order);
    every other column has one parameter per row, column after column (all ids, then all
    payloads, …), so the parameter list is the columns of the batch laid end to end."""
    key = (n, shared)
    sql = _INSERT_SQL.get(key)
    if sql is None:
        number = 1
        per_column: dict[int, object] = {}
        for col, same in zip(_SHAREABLE, shared, strict=True):
            if same:
                per_column[col] = number
                number += 1
        first: dict[int, int] = {}
        for col in range(12):
            if col not in per_column:
                first[col] = number
                number += n
        tuples = []
        for i in range(n):
            cells = [f"?{per_column[c]}" if c in per_column else f"?{first[c] + i}" for c in range(12)]
            tuples.append("(" + ", ".join(cells) + ")")
        head = Q["insert_job"].split("VALUES")[0]
        sql = _INSERT_SQL[key] = head + "VALUES " + ", ".join(tuples)
    return sql


#: JobRow columns bound as BLOBs per row (id, payload): never shared.
_BLOB_COLUMNS = (0, 8)
_BLOB_SLICES: dict[InsertKey, tuple[tuple[int, int], ...]] = {}


def blob_slices(key: InsertKey) -> tuple[tuple[int, int], ...]:
    """Where the id and payload columns lie in the parameter list of ``insert_sql(*key)``:
    (start, stop) per column. ``run_inserts`` binds them as ``bytearray``: Python's sqlite3
    binds ``int``, ``float``, ``str`` and ``bytearray`` directly, but sends every ``bytes``
    value through its adapter lookup first (a tuple, a dict lookup and two failed attribute
    lookups, one raising and clearing an AttributeError: measured 250 ns a value, against
    60 ns for the conversion)."""
    out = _BLOB_SLICES.get(key)
    if out is None:
        n, shared = key
        start = sum(shared)
        slices = []
        for col in range(12):
            if col in _SHAREABLE and shared[_SHAREABLE.index(col)]:
                continue
            if col in _BLOB_COLUMNS:
                slices.append((start, start + n))
            start += n
        out = _BLOB_SLICES[key] = tuple(slices)
    return out


def insert_statements(rows: Sequence[JobRow]) -> list[tuple[InsertKey | None, Sequence[object]]]:
    """Insert rows with multi-row INSERTs: one sqlite3_step per chunk instead of one per row,
    so the writer thread gives up and retakes the GIL once per chunk, not once per job
    (with a busy event loop each retake can wait for the interpreter's switch interval).

    Binding parameters holds the GIL; a column with one value for the whole chunk (queue,
    type, state, times, … in a typical batch) is bound once instead of once per row
    (measured: 3.7 → 2.5 µs of writer time per job). The checks and the parameter list
    are C-level list operations on the transposed chunk. Returns (statement key, params)
    pairs: the key is ``insert_sql``'s arguments, or None for the one-row INSERT; the
    statement text is looked up where the statement runs."""
    out: list[tuple[InsertKey | None, Sequence[object]]] = []
    for start in range(0, len(rows), INSERT_CHUNK):
        chunk = rows[start:start + INSERT_CHUNK]
        n = len(chunk)
        if n == 1:
            out.append((None, chunk[0]))
            continue
        columns = list(zip(*chunk, strict=True))
        shared = tuple(columns[c].count(columns[c][0]) == n for c in _SHAREABLE)
        params: list[object] = [columns[c][0] for c, same in zip(_SHAREABLE, shared, strict=True) if same]
        for c in range(12):
            if c not in _SHAREABLE or not shared[_SHAREABLE.index(c)]:
                params.extend(columns[c])
        out.append(((n, shared), params))
    return out


_ACK_SQL: dict[int, str] = {}
_ACK_RESULTS_SQL: dict[int, str] = {}
#: Most acks folded into one UPDATE statement (a Settle of more is split).
ACK_CHUNK = 256


def ack_sql(n: int) -> str:
    """The batched ack of ``n`` leases (``ack_many_head`` with ``n`` (job id, lease id)
    pairs from ?3 on): the rule ``sepp.domain.transitions.ack`` for many jobs at once."""
    sql = _ACK_SQL.get(n)
    if sql is None:
        values = ", ".join(f"(?{3 + 2 * i}, ?{4 + 2 * i})" for i in range(n))
        sql = _ACK_SQL[n] = Q["ack_many_head"].replace("{values}", values)
    return sql


def ack_results_sql(n: int) -> str:
    """``ack_sql`` for acks that may carry results: ``ack_many_results_head`` with ``n``
    (job id, lease id, result, encoding) quadruples from ?3 on."""
    sql = _ACK_RESULTS_SQL.get(n)
    if sql is None:
        values = ", ".join(f"(?{3 + 4 * i}, ?{4 + 4 * i}, ?{5 + 4 * i}, ?{6 + 4 * i})" for i in range(n))
        sql = _ACK_RESULTS_SQL[n] = Q["ack_many_results_head"].replace("{values}", values)
    return sql
