"""``Attempt``: one delivery of a job as its history records it, read from the wire ``Attempt``.

Its own small module so that both front ends share it: the producer's ``JobOutcome`` and
``Client.job`` (``sepp.request.outcomes``) and the worker's ``Job.history``
(``sepp.worker.JobAttempt``) without the worker loading the producer's models.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Self

from google.protobuf import timestamp_pb2


def wire_time(ts: timestamp_pb2.Timestamp, present: bool) -> dt.datetime | None:
    """A wire ``Timestamp`` as an aware UTC ``datetime`` (microseconds); None when the field
    is not ``present`` (unset on the wire)."""
    if not present:
        return None
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=ts.ToMicroseconds())


@dataclass(frozen=True, slots=True)
class Attempt:
    """One delivery of a job, as its history records it.

    Attributes:
        attempt: 1 for the first delivery (a released attempt keeps its number).
        worker_id: The worker that held the lease ("" when unknown).
        node: The server node that leased it ("" when unknown).
        started_at / ended_at: When the lease was granted and when the attempt ended (UTC;
            None when unknown).
        outcome: ``completed``, ``retry``, ``retry_after``, ``dead_letter``, ``released``,
            ``lease_expired`` or ``cancelled``.
        error_message / error_detail: What the worker reported ("" when nothing).
    """

    attempt: int
    worker_id: str
    node: str
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    outcome: str
    error_message: str
    error_detail: str

    @classmethod
    def from_proto(cls, msg: Any) -> Self:
        """Build from a wire ``Attempt``."""
        return cls(msg.attempt, msg.worker_id, msg.node, wire_time(msg.started_at, msg.HasField("started_at")),
                   wire_time(msg.ended_at, msg.HasField("ended_at")), msg.outcome, msg.error_message, msg.error_detail)
