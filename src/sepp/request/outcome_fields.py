"""The fields of a finished job's outcome (``OutcomeFields``), the data ``JobOutcome``
(``sepp.request.outcomes``) is made of: kept apart so that ``sepp.errors``, whose
``JobFailed`` / ``JobCancelled`` carry an outcome, can name its type without importing the
module whose ``JobOutcome.value`` raises them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Self

from sepp.api.v1 import producer_pb2 as ppb
from sepp.attempts import Attempt, wire_time
from sepp.domain.states import state_label
from sepp.request import Payload

COMPLETED, DEAD_LETTERED, CANCELLED = "COMPLETED", "DEAD_LETTERED", "CANCELLED"


@dataclass(frozen=True, slots=True)
class OutcomeFields:
    """What became of a finished job, as data: the fields of a ``JobOutcome`` (which adds
    ``value()``, the result as ``Client.result`` gives it).

    Attributes:
        job_id: The job's id (canonical UUID text).
        state: ``"COMPLETED"``, ``"DEAD_LETTERED"`` or ``"CANCELLED"``.
        result: The handler's return value as stored (data and encoding label), None when it
            returned none or the job did not complete; ``JobOutcome.value`` decodes it.
        last_error: The error message of the last attempt that reported one ("" when none).
        attempt: Deliveries (1 on the first).
        attempts: Every attempt, oldest first (the completing one included).
        finished_at: When the job reached ``state`` (UTC).
        queue / job_type: As enqueued.
        reason: Why it was dead-lettered (``ATTEMPTS_EXHAUSTED``, ``NACK_DEAD_LETTER`` or
            ``LEASE_EXPIRED``, plus the worker's reason) or cancelled; "" for a completed job.
    """

    job_id: str
    state: str
    result: Payload | None
    last_error: str
    attempt: int
    attempts: tuple[Attempt, ...]
    finished_at: dt.datetime | None
    queue: str
    job_type: str
    reason: str

    @property
    def completed(self) -> bool:
        """Whether the job completed (its handler returned)."""
        return self.state == COMPLETED

    @property
    def dead_lettered(self) -> bool:
        """Whether the job was dead-lettered (it failed for good)."""
        return self.state == DEAD_LETTERED

    @property
    def cancelled(self) -> bool:
        """Whether an admin cancelled the job."""
        return self.state == CANCELLED

    @classmethod
    def from_proto(cls, msg: ppb.JobOutcome) -> Self:
        """Build from a wire ``JobOutcome``."""
        result = Payload(bytes(msg.result.data), msg.result.encoding) if msg.HasField("result") else None
        return cls(msg.job_id, state_label(int(msg.state)), result, msg.last_error, msg.attempt,
                   tuple(Attempt.from_proto(a) for a in msg.attempts),
                   wire_time(msg.finished_at, msg.HasField("finished_at")), msg.queue, msg.job_type, msg.reason)


__all__ = ["CANCELLED", "COMPLETED", "DEAD_LETTERED", "OutcomeFields"]
