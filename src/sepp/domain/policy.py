"""A queue's retry and retention policy as the store needs it inside a write."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """What the store needs to know of a queue's settings inside a write (all µs)."""

    backoff_base: int = 1_000_000
    backoff_cap: int = 3_600_000_000
    jitter: float = 0.2
    completed_retention: int = 86_400_000_000
    dead_retention: int = 14 * 86_400_000_000
    #: The queue has a flow limit: every settle of one of its jobs frees capacity,
    #: so the store wakes the queue's long-polling reservers on every node, not only when a
    #: job became READY again.
    wake_on_settle: bool = False
    #: Largest result an ack of the queue's jobs may store, bytes (``QueueLimits.max_result_bytes``):
    #: an ack with a larger one fails its attempt instead (``transitions.settle``).
    max_result_bytes: int = 1 << 20

    def backoff(self, attempt: int, rand: float) -> int:
        """Delay before retry number ``attempt`` (1-based), µs: base × 2^(attempt−1), capped,
        then scaled by (1 + jitter × rand) with ``rand`` uniform in [−1, 1]."""
        delay = min(self.backoff_cap, self.backoff_base * (2 ** min(attempt - 1, 62)))
        return max(0, int(delay * (1 + self.jitter * rand)))


#: Looks a queue's policy up by name (called inside writes, where the writer runs).
PolicyLookup = Callable[[str], QueuePolicy]


class PolicyTable:
    """A picklable, immutable ``PolicyLookup`` (it travels to the writer process with the
    writes that need it): the policies of the queues whose settings differ from the
    defaults, and ``default`` for every other name."""

    __slots__ = ("custom", "default", "result_floor")

    def __init__(self, default: QueuePolicy, custom: dict[str, QueuePolicy] | None = None) -> None:
        self.default = default
        self.custom = custom or {}
        #: The smallest ``max_result_bytes`` of any queue (bytes): an ack whose result is no
        #: longer cannot be refused, whatever its job's queue (``result_floor``).
        self.result_floor = min(p.max_result_bytes for p in (default, *self.custom.values()))

    def __call__(self, name: str) -> QueuePolicy:
        return self.custom.get(name, self.default)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PolicyTable, (self.default, self.custom))


def result_floor(policy: PolicyLookup) -> int:
    """The longest result (bytes) no queue of ``policy`` refuses: a driver may write an ack
    with a result up to this long without looking its queue's limit up (its batched ack
    statement). 0 for a lookup that is not a ``PolicyTable`` (any result is checked)."""
    return policy.result_floor if isinstance(policy, PolicyTable) else 0
