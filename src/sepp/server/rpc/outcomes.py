"""Jobs' outcomes → wire ``JobOutcome`` messages: a wait's ``WaitJobsResponse``
(``ProducerService.WaitJobs``) and a handler's ``DependencyOutcomesResponse``
(``WorkerService.DependencyOutcomes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.ids import job_id_text
from sepp.domain.outcomes import JobOutcome
from sepp.server.rpc.convert import add_attempts, set_ts


def wait_response(outcomes: Sequence[JobOutcome]) -> ppb.WaitJobsResponse:
    """The answer to a wait: one ``JobOutcome`` message per outcome, in order."""
    resp = ppb.WaitJobsResponse()
    add = resp.outcomes.add
    for o in outcomes:
        add_outcome(add, o)
    return resp


def dependency_response(total: int,
                        outcomes: Sequence[tuple[bytes, JobOutcome | None]]) -> wpb.DependencyOutcomesResponse:
    """The answer to a handler's read of its dependencies: ``total`` and one ``JobOutcome``
    message per ``(id, outcome)``, in order; a dependency no longer stored (``None``) has
    only its ``job_id`` (state unset)."""
    resp = wpb.DependencyOutcomesResponse(total=total)
    add = resp.outcomes.add
    for job_id, o in outcomes:
        if o is None:
            add(job_id=job_id_text(job_id))
        else:
            add_outcome(add, o)
    return resp


def add_outcome(add: Any, o: JobOutcome) -> None:
    """Append ``o`` as a ``JobOutcome`` message with ``add`` (a repeated field's ``add``)."""
    entries = o.attempt_entries()
    last_error = next((e["error_message"] for e in reversed(entries) if e["error_message"]), "")
    msg = add(job_id=job_id_text(o.id), state=o.state,
              attempt=max(-(2**31), min(2**31 - 1, o.attempt)), queue=o.queue, job_type=o.job_type,
              reason=o.reason or "", last_error=last_error)
    if o.result is not None:
        payload = msg.result
        payload.data = o.result
        payload.encoding = o.result_encoding or ""
    if o.finished_at is not None:
        set_ts(msg.finished_at, o.finished_at)
    add_attempts(msg.attempts, entries)
