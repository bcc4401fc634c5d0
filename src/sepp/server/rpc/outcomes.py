"""A wait's outcomes → the ``WaitJobsResponse`` message (``ProducerService.WaitJobs``)."""

from __future__ import annotations

from collections.abc import Sequence

from sepp.api.v1 import producer_pb2 as ppb
from sepp.domain.ids import job_id_text
from sepp.domain.outcomes import JobOutcome
from sepp.server.rpc.convert import add_attempts, set_ts


def wait_response(outcomes: Sequence[JobOutcome]) -> ppb.WaitJobsResponse:
    """The answer to a wait: one ``JobOutcome`` message per outcome, in order."""
    resp = ppb.WaitJobsResponse()
    add = resp.outcomes.add
    for o in outcomes:
        entries = o.attempt_entries()
        last_error = next((e["error_message"] for e in reversed(entries) if e["error_message"]), "")
        msg = add(job_id=job_id_text(o.id), state=o.state,  # type: ignore[arg-type]
                  attempt=max(-(2**31), min(2**31 - 1, o.attempt)), queue=o.queue, job_type=o.job_type,
                  reason=o.reason or "", last_error=last_error)
        if o.result is not None:
            payload = msg.result
            payload.data = o.result
            payload.encoding = o.result_encoding or ""
        if o.finished_at is not None:
            set_ts(msg.finished_at, o.finished_at)
        add_attempts(msg.attempts, entries)
    return resp
