"""What a producer learns of a finished job (``Client.wait``, ``Client.as_completed``,
``Client.result``): ``JobOutcome`` with its ``Attempt`` history (``JobOutcome.value`` is what
``Client.result`` returns or raises for it), and ``decode_result``, the one rule that turns a
stored result into the value ``Client.result`` returns. Frozen
dataclasses, no I/O, built from wire messages with ``from_proto``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sepp.api.v1 import producer_pb2 as ppb
from sepp.attempts import Attempt as Attempt  # re-exported: a job's history on the producer's side
from sepp.attempts import wire_time
from sepp.domain.states import state_label
from sepp.errors import JobCancelled, JobFailed
from sepp.job_result import result_value
from sepp.request import Payload

#: The encoding label of a result that is raw bytes (a handler returned ``bytes``).
OCTET_STREAM = "application/octet-stream"

COMPLETED, DEAD_LETTERED, CANCELLED = "COMPLETED", "DEAD_LETTERED", "CANCELLED"


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What became of a finished job.

    Attributes:
        job_id: The job's id (canonical UUID text).
        state: ``"COMPLETED"``, ``"DEAD_LETTERED"`` or ``"CANCELLED"``.
        result: The handler's return value as stored (data and encoding label), None when it
            returned none or the job did not complete; :meth:`value` decodes it.
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

    def value(self) -> Any:
        """What ``Client.result`` returns for this outcome: the decoded result of a COMPLETED
        job (``decode_result``: the JSON value, ``bytes`` for ``application/octet-stream``, a
        ``sepp.Result`` for another label; None when the handler returned none).

        Raises ``sepp.JobFailed`` for a DEAD_LETTERED job and ``sepp.JobCancelled`` for a
        CANCELLED one, as ``Client.result`` does (check ``completed`` first to branch without
        them; ``result`` holds nothing for such a job); ``ValueError`` when a result labelled
        JSON does not decode.
        """
        if self.state == DEAD_LETTERED:
            raise JobFailed(self)
        if self.state == CANCELLED:
            raise JobCancelled(self)
        return decode_result(self.result)

    @classmethod
    def from_proto(cls, msg: ppb.JobOutcome) -> JobOutcome:
        """Build from a wire ``JobOutcome``."""
        result = Payload(bytes(msg.result.data), msg.result.encoding) if msg.HasField("result") else None
        return cls(msg.job_id, state_label(int(msg.state)), result, msg.last_error, msg.attempt,
                   tuple(Attempt.from_proto(a) for a in msg.attempts),
                   wire_time(msg.finished_at, msg.HasField("finished_at")), msg.queue, msg.job_type, msg.reason)


def decode_result(result: Payload | None) -> Any:
    """A stored result as ``Client.result`` returns it: None without one; for
    ``application/json`` the decoded JSON value; for ``application/octet-stream`` the bytes;
    for any other encoding a ``sepp.Result`` (data and label) — ``job_result.result_value``,
    the one rule for reading a result back.

    Raises ``ValueError`` when a result labelled JSON does not decode.
    """
    if result is None:
        return None
    return result_value(result.data, result.encoding)


__all__ = ["CANCELLED", "COMPLETED", "DEAD_LETTERED", "OCTET_STREAM", "Attempt", "JobOutcome", "decode_result"]
