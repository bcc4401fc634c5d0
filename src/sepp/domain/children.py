"""Children of a running job: jobs a handler enqueues from its attempt
(``Job.enqueue_children``), stored in the commit of the ack that completes that attempt — or
not at all (docs/workflows.md "A running job extends its workflow").

The server validates the requests and builds their rows (``params.Children``); it rides on the
ack's ``SettleParams.children``. A driver, applying that ack, stores the rows in the job's workflow,
points the job's dependents at ``Children.targets`` instead of the job (so its completion
releases none of them; they wait for the children) and then completes the job, all in one
commit. When it cannot store them (a ``depends_on`` id of no stored job) it fails the attempt
instead (``refused_children``): retried per the queue's policy, the reason in the history.

Times are integer microseconds since the Unix epoch (UTC); ids 16-byte UUID blobs.
"""

from __future__ import annotations

from sepp.domain.ids import job_id_text
from sepp.domain.params import Children, SettleKind, SettleParams

#: The catalogue name a refused child's history entry starts with
#: (``RejectionCode.DEPENDENCY_NOT_FOUND``: the one refusal only the store can find).
DEPENDENCY_NOT_FOUND = "DependencyNotFound"


def missing_dependency_message(index: int, dep_id: bytes) -> str:
    """Why the children of an ack are refused when child ``index`` (the callback: the last
    index) depends on ``dep_id`` (16 bytes), which is no stored job: the text the attempt's
    history records."""
    return (f"{DEPENDENCY_NOT_FOUND}: child {index} depends on job {job_id_text(dep_id)}, which does not exist "
            "(never enqueued, or purged after its retention); no child was stored, the attempt failed and is "
            "retried per the queue's policy")


def refused_children(p: SettleParams, message: str) -> SettleParams:
    """The nack an ack ``p`` becomes when its children are refused (``message``: why): RETRY
    with the queue's backoff (outcome ``retry``), no result, no children, the refusal as its
    error message."""
    return SettleParams(p.job_id, p.lease_id, SettleKind.RETRY, p.now, outcome="retry", error_message=message)


__all__ = ["DEPENDENCY_NOT_FOUND", "Children", "missing_dependency_message", "refused_children"]
