"""The held-back view of a flow-limited queue
(docs/flow-control.md "What the limits hold back").

"Held back" is measured against one imagined reserve made right now that asks for every
READY job of the queue at once (no ``max_jobs`` cap, no byte budget, the queue taken as not
paused): a READY job is held back by a limit when that reserve would not hand it out because
of that limit. Each limit is judged on its own, as if it were the queue's only one, so the
three counts can overlap; ``total`` is what all the limits together hold back, which is at
least the largest of the three and at most their sum:

* ``max_in_flight``: READY − the free slots (``max_in_flight`` − RESERVED), at least 0;
* ``rate_limit``: READY − the whole tokens in the bucket now, at least 0;
* ``per_key``: of the first ``flow_keys.KEY_SCAN`` READY jobs in reserve order (what a
  reserve looks at), those whose group is at ``max_in_flight_per_key`` once the jobs ahead
  of them are counted; ``scan_limited`` when the queue has more READY jobs than that (the
  count is then a lower bound);
* ``total``: READY − min(free slots, tokens, the jobs the per-key walk lets through).

Cost: the counts the stats view holds already, plus one bucket row read with a rate limit
and, with a per-key limit, the extras of the RESERVED jobs and of at most ``KEY_SCAN`` READY
jobs (``AdminStore.flow_read``) — bounded whatever the queue holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from sepp.domain.params import FlowLimits
from sepp.storage.admin import FlowRead


@dataclass(frozen=True, slots=True)
class HeldBack:
    """READY jobs each limit of a queue holds back right now (module docstring); 0 for a
    limit the queue does not have."""

    max_in_flight: int = 0
    rate_limit: int = 0
    per_key: int = 0
    total: int = 0
    #: The per-key count covers only the first ``KEY_SCAN`` READY jobs (a lower bound).
    scan_limited: bool = False
    #: The limits the queue has, of ``max_in_flight``, ``rate_limit``, ``per_key`` (in that order).
    limited: tuple[str, ...] = ()


def held_back(limits: FlowLimits, ready: int, reserved: int, read: FlowRead, now: int) -> HeldBack:
    """The ``HeldBack`` of a queue with ``limits``, ``ready`` READY and ``reserved`` RESERVED
    jobs, the store's ``read`` (``AdminStore.flow_read``) at ``now`` (µs UTC). Pure."""
    ready = max(0, ready)
    passes = ready  # what one reserve asking for every READY job would get
    by_slots = by_rate = by_key = 0
    scan_limited = False
    limited: list[str] = []
    if limits.max_in_flight:
        limited.append("max_in_flight")
        free = max(0, limits.max_in_flight - max(0, reserved))
        by_slots = max(0, ready - free)
        passes = min(passes, free)
    if limits.rate_amount:
        limited.append("rate_limit")
        tokens = limits.bucket(read.bucket, now).whole
        by_rate = max(0, ready - tokens)
        passes = min(passes, tokens)
    if limits.per_key:
        limited.append("per_key")
        by_key = max(0, read.key_scanned - read.key_allowed)
        scan_limited = ready > read.key_scanned
        passes = min(passes, read.key_allowed)
    return HeldBack(by_slots, by_rate, by_key, max(0, ready - passes), scan_limited, tuple(limited))
