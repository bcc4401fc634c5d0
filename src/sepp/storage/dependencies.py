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
from typing import NamedTuple

from sepp.domain.ids import job_id_text
from sepp.domain.states import State

_COMPLETED, _DEFERRED = int(State.COMPLETED), int(State.DEFERRED)
_DEAD, _CANCELLED = int(State.DEAD_LETTERED), int(State.CANCELLED)

#: Row index → the ids of the jobs that row depends on (16 bytes each, distinct, in order).
DependsOn = Mapping[int, Sequence[bytes]]

#: What a job does when a dependency is dead-lettered or cancelled (the ``on_dep_fail``
#: column; docs/workflows.md "When a dependency fails"): CANCELLED naming it (the default),
#: released anyway, or DEFERRED until it is redriven and completes.
CANCEL, RUN, WAIT = 0, 1, 2
#: Policy name (``EnqueueRequest.with_on_dependency_failure``) → its column value.
POLICY_BY_NAME: dict[str, int] = {"cancel": CANCEL, "run": RUN, "wait": WAIT}
#: Row index → its policy (a row left out: ``CANCEL``).
OnFailure = Mapping[int, int]


class Found(NamedTuple):
    """A dependency as the enqueue's transaction read it: its seq, state and purge_at (µs or None)."""

    seq: int
    state: int
    purge_at: int | None


class Plan(NamedTuple):
    """What a row with dependencies is stored as: ``waits`` the seqs of the dependencies it
    waits for (one edge each; its ``deps_left``), and for the "cancel" policy the first
    dependency already DEAD_LETTERED or CANCELLED (``failed``: the row is stored CANCELLED
    naming it), else None."""

    waits: list[int]
    failed: tuple[bytes, Found] | None


def plan(ids: Sequence[bytes], found: Mapping[bytes, Found], policy: int) -> Plan:
    """The ``Plan`` of a row depending on ``ids`` (each in ``found``) with ``policy``: every
    dependency not COMPLETED is waited for, except, with "run", a failed one (settled as far
    as this job is concerned)."""
    waits: list[int] = []
    failed: tuple[bytes, Found] | None = None
    for dep in ids:
        f = found[dep]
        if f.state == _COMPLETED:
            continue
        if f.state in (_DEAD, _CANCELLED):
            if policy == RUN:
                continue
            if policy == CANCEL and failed is None:
                failed = (dep, f)
        waits.append(f.seq)
    return Plan(waits, failed)


def failure_reason(dep_id: bytes, state: int) -> str:
    """The reason of a job CANCELLED because its dependency ``dep_id`` (16 bytes) failed
    into ``state``: ``DEPENDENCY_FAILED: dependency <id> was dead-lettered`` (or ``cancelled``)."""
    return (f"DEPENDENCY_FAILED: dependency {job_id_text(dep_id)} was "
            f"{'dead-lettered' if state == _DEAD else 'cancelled'}")


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


__all__ = ["CANCEL", "POLICY_BY_NAME", "RUN", "WAIT", "DependsOn", "Found", "OnFailure", "Plan", "failure_reason",
           "missing_of", "packed", "plan", "unfinished", "unpacked"]
