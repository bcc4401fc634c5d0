"""Hard limits: the fixed ranges no setting can widen, as plain numbers (no pydantic).

Three modules, three jobs: this one holds the numbers — the units, the largest and smallest
value each setting and wire field may take, ``fmt_number`` to write one in an error;
``sepp.limits`` holds the configurable limits and queue settings (pydantic models bounded by
these numbers, which it re-exports: it is where users read about them);
``sepp.server.rpc_args`` checks an RPC's arguments against them on the server. The numbers
live apart so that code needing only a number — the ``Worker`` runtime's ``settle_batch``
bound — imports it without pydantic (docs/decisions.md "A worker imports no pydantic").
Sizes are bytes, durations seconds.
"""

from __future__ import annotations

import math

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
HOUR = 3600.0
DAY = 24 * HOUR
YEAR = 365 * DAY

#: Longest idempotency window or retention of a queue, seconds: 10 years.
MAX_RETENTION = 10 * YEAR
#: Longest retry backoff (``retry_base``, ``retry_cap``), seconds: 365 days, the default
#: ``max_schedule_horizon`` (a nack's own ``retry_after`` is bounded by the configured one).
MAX_BACKOFF = 365 * DAY
#: Longest ``max_schedule_horizon`` a server may be configured with, seconds: 10 years.
MAX_HORIZON = 10 * YEAR
#: Shortest and longest lease (queue default, Reserve, ExtendLease), seconds: 1 ms .. 1 day.
MIN_LEASE, MAX_LEASE = 0.001, DAY
#: Largest size or count setting: gRPC's own message cap (int32), so it fits every proto field.
MAX_SIZE = 2**31 - 1
#: Most labels in a queue's ``limits.allowed_encodings`` (each label is also at most the
#: server's ``limits.max_encoding_bytes``): every queue's settings travel in each
#: GetServerInfo / ListQueues answer, so an unbounded list could push those answers past the
#: message cap and stop every producer.
MAX_ALLOWED_ENCODINGS = 64
#: Most items one ``Settle`` call may carry. A refusal costs the server a result per item
#: (each may quote 200 bytes of a bad id), so an unbounded list made a 2 MB request cost
#: seconds of the event loop and an answer beyond the message cap. 10,000 is
#: 40× the Worker's default ``settle_batch`` (256), which is bounded by it too.
MAX_SETTLE_BATCH = 10_000
#: Most job ids one ``WaitJobs`` call waits for (``Client.wait`` / ``as_completed`` split
#: longer lists): each id is one lookup of every re-read of the call, and 1,000 outcomes with
#: their histories still fit one answer in the common case.
MAX_WAIT_JOBS = 1_000
#: Most nodes one ``EnqueueWorkflow`` call may carry (docs/workflows.md "Workflows"): the
#: whole graph is one commit, and the request one message within ``max_message_bytes``.
MAX_WORKFLOW_NODES = 10_000
#: Largest workflow sent in parts (``EnqueueWorkflowParts``: the graph larger than one gRPC
#: message), bytes of all its parts together: the server holds the whole graph in memory
#: until its one commit, so this bounds what one call can make it hold.
MAX_WORKFLOW_PARTS_BYTES = 256 * MiB
#: Most jobs one ack may carry as children of the job it completes (``Job.enqueue_children``,
#: the ``then`` callback included; docs/workflows.md "A running job extends its workflow"):
#: they are stored in the ack's commit, which holds the job's row lock meanwhile.
MAX_CHILDREN = 1_000
#: Longest ``limits.max_wait_seconds`` a server may be configured with, seconds: one hour
#: (a longer wait holds a call open past what proxies and load balancers let idle).
MAX_WAIT_SECONDS = 3600.0
#: Largest progress value a handler may report (``Job.set_progress``), UTF-8 bytes of its
#: JSON text: enough for a fraction, a dict of counters or a short text, small enough that
#: a progress write (at most one per job per second) costs what a lease extension costs.
MAX_PROGRESS_BYTES = 4_096
#: Largest ``limits.max_queues``. Every queue travels in each GetServerInfo / ListQueues
#: answer (~150 bytes with default settings): 100,000 of them stay under the 16 MiB message
#: cap, so producers (which read server info first) keep working.
MAX_QUEUES = 100_000
#: Longest trace context key, UTF-8 bytes (fixed, not configurable: the settings
#: bound the entry count and value size only). Propagation header names are far shorter.
MAX_TRACE_KEY_BYTES = 256
#: Largest ``max_attempts`` ceiling and queue ``default_max_attempts``.
MAX_ATTEMPTS = 1_000_000
#: Timestamps the server accepts (google.protobuf.Timestamp's range, seconds since the epoch,
#: UTC): 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z. As µs that is at most
#: ±2.6e17, far inside int64 (±9.2e18) even with a 10-year window added.
MIN_TIMESTAMP_SECONDS, MAX_TIMESTAMP_SECONDS = -62_135_596_800, 253_402_300_799
#: google.protobuf.Duration's range, seconds (±10,000 years); nanos in ±999,999,999, same sign.
MAX_DURATION_SECONDS = 315_576_000_000


def fmt_number(value: float) -> str:
    """A bound or a value as error text: an integral value without a fraction
    (``315360000``, ``10000000000000``), any other as Python writes it (``0.001``, ``nan``)."""
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(value)
