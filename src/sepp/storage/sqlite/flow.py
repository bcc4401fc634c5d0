"""Flow control inside the SQLite backend's reserve (docs/flow-control.md).

Runs on the writer connection inside ``ops.reserve_op``'s transaction: the single writer
serialises every reserve, so a count taken here cannot be overtaken by another reserve
before the lease lands. Only queues with a limit reach this module (``ReserveParams.flow``);
an unlimited queue keeps the plain reserve statements.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sepp.domain.params import Bucket, FlowLimits
from sepp.storage import flow_keys
from sepp.storage.row_types import LeasedRow, at
from sepp.storage.sqlite.sql import Q

#: Positions in a ``ready_for_lease`` row (``LeasedRow``).
_PAYLOAD, _HISTORY, _SEQ = at(LeasedRow, "payload"), at(LeasedRow, "history"), at(LeasedRow, "seq")


def room(conn: sqlite3.Connection, queue: str, limits: FlowLimits, want: int,
         now: int) -> tuple[int, Bucket | None, int]:
    """How many of ``want`` jobs ``queue`` may lease at ``now`` (µs), its token bucket as
    refilled (None without a rate limit; ``spend`` it after leasing) and the queue's
    RESERVED jobs (counted through ``jobs_leased``, queue first, when ``max_in_flight`` or a
    per-key limit is set, else 0): ``want`` cut to the free slots under ``max_in_flight`` and
    to the whole tokens in the bucket. 0 means the limits hold every job back."""
    reserved = 0
    if limits.max_in_flight or limits.per_key:
        reserved = int(conn.execute(Q["count_reserved_in"], (queue,)).fetchone()[0])
    if limits.max_in_flight:
        want = min(want, limits.max_in_flight - reserved)
    bucket = None
    if limits.rate_amount and want > 0:
        found = conn.execute(Q["bucket_get"], (queue,)).fetchone()
        bucket = limits.bucket(found, now)
        want = min(want, bucket.whole)
    return max(0, want), bucket, reserved


def may_bind_per_key(limits: FlowLimits, reserved: int, allowed: int) -> bool:
    """True when the per-key limit could hold back one of ``allowed`` more jobs of a queue
    with ``reserved`` RESERVED jobs: only then must the reserve walk the groups
    (``key_rows``); otherwise it takes the plain reserve statements (measured: docs/decisions.md)."""
    return limits.per_key and reserved + allowed > limits.max_per_key


def spend(conn: sqlite3.Connection, queue: str, bucket: Bucket, taken: int) -> None:
    """Store ``bucket`` less the ``taken`` tokens of the jobs just leased."""
    conn.execute(Q["bucket_put"], (queue, bucket.tokens - taken, bucket.at))


def key_rows(conn: sqlite3.Connection, queue: str, limits: FlowLimits, want: int, budget: int, used: int,
             have: bool) -> tuple[list[Any], int]:
    """The ready_for_lease rows to lease under the per-key limit and their bytes: the
    RESERVED jobs of each group counted, then at most ``flow_keys.KEY_SCAN`` READY jobs
    walked in reserve order (``flow_keys.pick``; ``budget``/``used``/``have`` as in
    ``_ready_rows`` in ``ops``)."""
    held = flow_keys.reserved_groups((r[0] for r in conn.execute(Q["reserved_extras_in"], (queue,))), limits.key)
    picker = flow_keys.Picker(limits.key, limits.max_per_key, held, want, budget, used, have)
    candidates = conn.execute(Q["ready_keys"], (queue, flow_keys.KEY_SCAN))
    picker.feed(candidates)
    candidates.close()
    seqs = picker.seqs
    if not seqs:
        return [], 0
    rows = conn.execute(Q["ready_for_lease_seqs"], (json.dumps(seqs),)).fetchall()
    return rows, sum(len(r[_PAYLOAD]) + len(r[_HISTORY] or "") for r in rows)


def lease_rows(conn: sqlite3.Connection, rows: list[Any], lease_id: bytes, expires: int, worker: str, now: int,
               node: str) -> int:
    """Lease the READY jobs of ``rows`` (ready_for_lease rows, seq last); how many it leased."""
    seqs = json.dumps([r[_SEQ] for r in rows])
    return int(conn.execute(Q["lease_seqs"], (lease_id, expires, worker, now, seqs, node)).rowcount)
