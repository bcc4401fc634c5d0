"""What a producer learns of a finished job (``Client.wait``, ``Client.as_completed``,
``Client.result``): ``JobOutcome`` with its ``Attempt`` history (``JobOutcome.value`` is what
``Client.result`` returns or raises for it), and ``decode_result``, the one rule that turns a
stored result into the value ``Client.result`` returns. Frozen
dataclasses, no I/O, built from wire messages with ``from_proto``.
"""

from __future__ import annotations

from typing import Any

from sepp.attempts import Attempt as Attempt  # re-exported: a job's history on the producer's side
from sepp.errors import JobCancelled, JobFailed
from sepp.job_result import result_value
from sepp.request import Payload
from sepp.request.outcome_fields import CANCELLED, COMPLETED, DEAD_LETTERED, OutcomeFields

#: The encoding label of a result that is raw bytes (a handler returned ``bytes``).
OCTET_STREAM = "application/octet-stream"


class JobOutcome(OutcomeFields):
    """What became of a finished job: the fields of ``OutcomeFields`` (``job_id``, ``state``,
    ``result``, ``last_error``, ``attempt``, ``attempts``, ``finished_at``, ``queue``,
    ``job_type``, ``reason``; the properties ``completed``, ``dead_lettered``, ``cancelled``)
    and ``value()``. Frozen; ``JobOutcome.from_proto`` builds one from a wire ``JobOutcome``."""

    __slots__ = ()

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
