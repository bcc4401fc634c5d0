"""Jobs enqueued through the SQL functions, as a node hears of them.

``sepp.enqueue`` / ``sepp.enqueue_batch`` (migrations 0014 and 0015,
docs/enqueue-in-transaction.md) run in the application's own transaction, on no node. At
commit PostgreSQL delivers their notification on the channel every node LISTENs on:
``{"o": "sql", "q": [queues to wake], "k": queues created, "c": {queue: jobs stored},
"s": [[first seq, seqs], …]}`` (``_tell_nodes``; a long call's lists are split over several
notifications). The listener wakes the queues and reloads them as for any node's
notification; this module hands ``c`` and ``s`` to the ``subscribe`` callbacks, and reads
the jobs of those blocks of seqs on request (``jobs``: what their live ``enqueued`` events
name). Every node hears every such notification; one sent while a node's listener
connection was away is lost for that node (at-most-once, like the live events).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sepp.storage.postgres.listener import Listener
from sepp.storage.postgres.reads import PgReads
from sepp.storage.postgres.sql import Q

log = logging.getLogger("sepp.storage.postgres")

#: The origin the SQL functions' notifications carry (a node's is random hex).
SQL_ORIGIN = "sql"
#: Most seqs one block names (``ids.BLOCK``: the function takes the sequence's blocks).
BLOCK_SEQS = 1024
#: Blocks one ``jobs`` read takes (a notification holds about 140).
BLOCKS_PER_READ = 256

#: What a subscriber gets: jobs stored per queue, and the (first seq, seqs) blocks holding them.
SqlEnqueued = Callable[[Mapping[str, int], Sequence[tuple[int, int]]], None]
#: One job a ``jobs`` read finds: (16-byte id, queue, job type, run_at µs, enqueued_at µs).
SqlJob = tuple[bytes, str, str, int, int]


def parse_notice(data: Mapping[str, Any]) -> tuple[dict[str, int], list[tuple[int, int]]] | None:
    """(jobs stored per queue, blocks of seqs) of one parsed notification, or None when it
    is not the SQL functions' or names nothing (a version-14 function's payload has neither
    key). Entries of the wrong shape are left out."""
    if data.get("o") != SQL_ORIGIN:
        return None
    counts_in, blocks_in = data.get("c"), data.get("s")
    counts = {q: n for q, n in counts_in.items() if isinstance(q, str) and type(n) is int and n > 0} \
        if isinstance(counts_in, dict) else {}
    blocks = [(b[0], b[1]) for b in blocks_in
              if isinstance(b, list) and len(b) == 2 and type(b[0]) is int and type(b[1]) is int
              and b[0] >= 0 and 0 < b[1] <= BLOCK_SEQS] if isinstance(blocks_in, list) else []
    return (counts, blocks) if counts or blocks else None


class SqlEnqueueNotices:
    """The notifications of the module docstring for one store: heard through ``listener``,
    the jobs read on ``reads``' pool."""

    def __init__(self, reads: PgReads, listener: Listener) -> None:
        self._reads = reads
        self._subscribers: list[SqlEnqueued] = []
        listener.subscribe_notices(self._heard)

    def subscribe(self, enqueued: SqlEnqueued) -> None:
        """Call ``enqueued(counts, blocks)`` for each notification of jobs stored through the
        SQL functions (on the event loop)."""
        self._subscribers.append(enqueued)

    async def jobs(self, blocks: Sequence[tuple[int, int]]) -> list[SqlJob]:
        """The jobs stored in ``blocks`` ((first seq, seqs) each), in seq order: one read per
        ``BLOCKS_PER_READ`` blocks. A job deleted since is not there. Raises ``StoreError``."""
        out: list[SqlJob] = []
        for start in range(0, len(blocks), BLOCKS_PER_READ):
            part = blocks[start:start + BLOCKS_PER_READ]
            rows = await self._reads.fetch(Q["jobs_in_seq_blocks"], [b[0] for b in part], [b[1] for b in part])
            out.extend((bytes(r[0]), r[1], r[2], r[3], r[4]) for r in rows)
        return out

    def _heard(self, data: Mapping[str, Any]) -> None:
        parsed = parse_notice(data)
        if parsed is None:
            return
        counts, blocks = parsed
        for callback in self._subscribers:
            try:
                callback(counts, blocks)
            except Exception:  # a subscriber's bug must not stop the listener
                log.exception("SQL-enqueue subscriber failed")


__all__ = ["BLOCKS_PER_READ", "SQL_ORIGIN", "SqlEnqueueNotices", "SqlEnqueued", "SqlJob", "parse_notice"]
