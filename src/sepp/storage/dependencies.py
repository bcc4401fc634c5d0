"""Dependencies between jobs at enqueue, shared by the drivers (docs/workflows.md).

A row of ``Store.enqueue`` may name jobs it depends on (``depends_on``: row index → 16-byte
ids, distinct, in the order given). The driver, in the enqueue's own transaction, looks each
one up: an id of no stored job refuses the whole call (``DependencyMissing``, nothing
written); a COMPLETED one is satisfied already; every other one (SCHEDULED, READY, RESERVED,
DEFERRED, DEAD_LETTERED, CANCELLED) is *unfinished*: the driver marks it ``has_dependents``
and records one edge (its seq → the new job's seq) in ``job_waits``. A row with at least one
unfinished dependency is stored DEFERRED with ``deps_left`` = their number; its release is
the schema's ``jobs_release`` trigger, in the statement that completes its last dependency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sepp.domain.states import State

_COMPLETED, _DEFERRED = int(State.COMPLETED), int(State.DEFERRED)

#: Row index → the ids of the jobs that row depends on (16 bytes each, distinct, in order).
DependsOn = Mapping[int, Sequence[bytes]]


def packed(ids: Sequence[bytes]) -> bytes:
    """The ``depends_on`` column of a job: its dependencies' 16-byte ids end to end, in order."""
    return b"".join(ids)


def unpacked(column: bytes | None) -> list[bytes]:
    """The ids of a ``depends_on`` column (``packed``), in order; [] for NULL."""
    if not column:
        return []
    return [bytes(column[i : i + 16]) for i in range(0, len(column), 16)]


def missing_of(depends_on: DependsOn, found: Mapping[bytes, object]) -> dict[int, bytes]:
    """Row index → its first dependency id absent from ``found`` (ids of stored jobs), for
    every row of ``depends_on`` that names one; {} when every id is stored."""
    out: dict[int, bytes] = {}
    for i, ids in depends_on.items():
        for dep in ids:
            if dep not in found:
                out[i] = dep
                break
    return out


def unfinished(ids: Sequence[bytes], states: Mapping[bytes, int]) -> list[bytes]:
    """The ids among ``ids`` whose state (``states``) is not COMPLETED, in order."""
    return [dep for dep in ids if states[dep] != _COMPLETED]


__all__ = ["DependsOn", "missing_of", "packed", "unfinished", "unpacked"]
