"""The per-key limit of flow control, backend-neutral (``concurrency_key`` /
``max_in_flight_per_key``; docs/flow-control.md).

A job's group is the value of one custom-map entry, read from the stored ``extras`` blob
(the custom map and trace context, protobuf-encoded): the typed value, so the string ``"1"``
and the integer ``1`` are two groups. Jobs without the entry — or whose blob does not
decode — share the empty group. The backends count the RESERVED jobs of each group, then
walk the READY jobs in reserve order (priority, run_at, seq) and ``pick`` those whose group
has room: a tenant with a thousand jobs ahead cannot starve the next one, as long as it is
within the first ``KEY_SCAN`` READY jobs of the queue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from google.protobuf.message import DecodeError

from sepp.api.v1 import common_pb2 as pb

#: Most READY jobs one Reserve of a per-key-limited queue looks at (in reserve order). A
#: group behind more jobs of full groups than this waits until some of those run.
KEY_SCAN = 10_000
#: The group of a job without the entry.
NO_GROUP: tuple[str, Any] = ("", "")


def group_of(extras: bytes | None, key: str) -> tuple[str, Any]:
    """The group of a job: (kind, value) of its custom entry ``key``, or ``NO_GROUP``."""
    if not extras:
        return NO_GROUP
    try:
        custom = pb.EnqueueRequest.FromString(extras).custom
    except (DecodeError, TypeError):
        return NO_GROUP
    if key not in custom:
        return NO_GROUP
    value = custom[key]
    kind = value.WhichOneof("kind")
    return NO_GROUP if kind is None else (kind, getattr(value, kind))


def reserved_groups(extras: Iterable[bytes | None], key: str) -> Counter[tuple[str, Any]]:
    """How many RESERVED jobs each group holds, from their ``extras`` blobs."""
    return Counter(group_of(e, key) for e in extras)


class Picker:
    """Picks the seqs to lease from READY (seq, extras, bytes) rows fed in reserve order:
    a job is taken only while its group holds fewer than ``most`` (``held`` counts the
    RESERVED ones and is updated), at most ``want`` jobs, within the byte ``budget`` (0 = no
    budget; ``used`` bytes taken already by the call; its first job, ``have`` False, is
    always taken). ``seqs`` and ``used`` are the result so far."""

    __slots__ = ("budget", "done", "have", "held", "key", "most", "seqs", "used", "want")

    def __init__(self, key: str, most: int, held: Counter[tuple[str, Any]], want: int, budget: int, used: int,
                 have: bool) -> None:
        self.key, self.most, self.held, self.want = key, most, held, want
        self.budget, self.used, self.have = budget, used, have
        self.seqs: list[int] = []
        self.done = want <= 0

    def feed(self, rows: Iterable[Any]) -> bool:
        """Consider ``rows``; True once no more rows are needed (``want`` taken or the budget spent)."""
        for seq, extras, n in rows:
            if self.done:
                break
            group = group_of(extras, self.key)
            if self.held[group] >= self.most:
                continue
            if self.budget and self.used + n > self.budget and (self.seqs or self.have):
                self.done = True
                break
            self.held[group] += 1
            self.seqs.append(seq)
            self.used += n
            self.done = len(self.seqs) >= self.want
        return self.done


def key_room(key: str, most: int, reserved_extras: Iterable[bytes | None],
             ready: Iterable[tuple[int, bytes | None]]) -> tuple[int, int]:
    """What the per-key limit lets through right now (the held-back
    view): ``ready`` are (seq, extras) of the first READY jobs of the queue in reserve
    order (at most ``KEY_SCAN``, as a reserve reads them), ``reserved_extras`` the extras of
    its RESERVED jobs. Returns (allowed, scanned): how many of the ``scanned`` READY jobs a
    reserve asking for all of them would take under ``most`` per group (no byte budget)."""
    picker = Picker(key, most, reserved_groups(reserved_extras, key), KEY_SCAN, 0, 0, False)
    scanned = 0

    def rows() -> Iterable[tuple[int, bytes | None, int]]:
        nonlocal scanned
        for seq, extras in ready:
            scanned += 1
            yield seq, extras, 0

    picker.feed(rows())
    return len(picker.seqs), scanned
