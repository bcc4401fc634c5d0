"""Children of a running job on the server side: the requests an ack carries
(``AckRequest.children`` and ``then``) validated as enqueues and built into the
``domain.children.Children`` the store writes with the completion (docs/workflows.md "A
running job extends its workflow").

A child that fails its checks does not fail the call: the ack becomes a failed attempt
(``domain.children.refused_children``, retried per the queue's policy, the reason in the
job's history) and the caller gets the child's catalogued rejection, its field prefixed with
``children[i].`` (or ``then.``). More than ``MAX_CHILDREN`` is refused the same way
(INVALID_ARGUMENT, field ``children``). A ``depends_on`` id of no stored job is only found by
the store, in the ack's transaction; ``store_refusal`` is its rejection.
"""

from __future__ import annotations

from collections.abc import Sequence

import uuid_utils

from sepp.api.v1 import common_pb2 as pb
from sepp.domain.children import refused_children
from sepp.domain.params import Children, SettleParams, SettleResult
from sepp.domain.states import State
from sepp.hard_limits import MAX_CHILDREN
from sepp.rejections import RejectionCode
from sepp.server.admission import Admission

_IA = RejectionCode.INVALID_ARGUMENT.to_wire()
_DNF = RejectionCode.DEPENDENCY_NOT_FOUND.to_wire()
_COMPLETED = int(State.COMPLETED)


def _named(rejection: pb.Rejection, at: str) -> pb.Rejection:
    """``rejection`` of the child at ``at`` (``children[i]`` or ``then``): its field prefixed,
    its message saying which child and what became of the attempt."""
    field = f"{at}.{rejection.field}" if rejection.field else at
    return pb.Rejection(code=rejection.code, field=field, limit=rejection.limit, actual=rejection.actual,
                        message=f"{at}: {rejection.message}; no child was stored, the attempt failed and is "
                                "retried per the queue's policy")


def history_text(rejection: pb.Rejection) -> str:
    """The attempt-history message of an ack refused for ``rejection``: the catalogue name
    first (``PayloadTooLarge: children[2]: …``), as a refused result's starts with
    ``ResultTooLarge``."""
    return f"{RejectionCode.from_wire(rejection.code).value}: {rejection.message}"


def store_refusal() -> pb.Rejection:
    """The rejection an ack gets when the store refused its children (a ``depends_on`` id of
    no stored job: the job's history names the child and the id)."""
    return pb.Rejection(code=_DNF, field="children",  # type: ignore[arg-type]
                        message="a child depends on a job that does not exist (never enqueued, or purged after "
                                "its retention); no child was stored, the attempt failed and is retried per the "
                                "queue's policy (the job's attempt history names the child and the id)")


def children_refused(p: SettleParams, r: SettleResult) -> bool:
    """Whether ``r``, the verdict on ``p`` (an ack with children), means the store refused
    them: an applied ack that did not complete its job (a refused result is told first)."""
    return p.children is not None and r.error is None and r.state != _COMPLETED


class ChildAdmission:
    """Children of an ack on top of an ``Admission`` (its validator, row builder, ids and the
    tellings after a commit)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def attach(self, p: SettleParams, children: Sequence[pb.EnqueueRequest],
                     then: pb.EnqueueRequest | None) -> tuple[SettleParams, pb.Rejection | None]:
        """``p`` (an ack) carrying ``children`` and the callback ``then`` (None: none) as
        ``Children`` rows, and None; or, when one is refused, the failed attempt ``p``
        becomes (``refused_children``) and the rejection to answer. No child and no callback:
        ``p`` unchanged. Nothing is stored here: the store writes the rows with the ack."""
        reqs = [*children, then] if then is not None else list(children)
        n = len(reqs)
        if n == 0:
            return p, None
        if n > MAX_CHILDREN:
            rejection = pb.Rejection(code=_IA, field="children", limit=MAX_CHILDREN, actual=n,  # type: ignore[arg-type]
                                     message=f"an ack carries at most {MAX_CHILDREN} children (the callback "
                                             f"included), got {n}; no child was stored, the attempt failed and "
                                             "is retried per the queue's policy")
            return refused_children(p, history_text(rejection)), rejection
        adm = self.admission
        adm.queues.begin_admission()
        now = p.now
        verdicts = [adm.validator.check(req, now * 1000) for req in reqs]
        for i, (req, verdict) in enumerate(zip(reqs, verdicts, strict=True)):
            at = "then" if then is not None and i == n - 1 else f"children[{i}]"
            if type(verdict) is pb.Rejection:
                rejection = _named(verdict, at)
            elif req.idempotency_key:
                rejection = _named(pb.Rejection(code=_IA, field="idempotency_key",  # type: ignore[arg-type]
                                                message="a child has no idempotency key: the ack that stores it "
                                                        "is stored once"), at)
            else:
                continue
            adm.events.rejected([(req.queue, rejection)])
            return refused_children(p, history_text(rejection)), rejection
        uids = await adm.store.new_job_ids(n)
        rows, new_queues, custom, deps = adm.build_rows(reqs, verdicts, uids, now)
        depends_on: dict[int, list[bytes]] = {i: deps[i] for i in range(n) if i in deps}
        targets = list(range(n))
        if then is not None:
            last = n - 1
            kids = [u.bytes for u in uids[:last]]
            depends_on[last] = kids + [d for d in deps.get(last, ()) if d not in kids]
            targets = [last]
        kids_of = Children(rows, new_queues, custom, depends_on, deps.policies, targets, uuid_utils.uuid7().bytes)
        return p._replace(children=kids_of), None

    def told(self, items: Sequence[SettleParams], results: Sequence[SettleResult]) -> None:
        """After a settle's commit: tell of the children the acks among ``items`` stored
        (``results[i]`` answers ``items[i]``; a repeated ack, run_at 0, stored none):
        ``Admission.stored`` — events, live job events, new queues persisted, reservers of
        their queues woken."""
        for p, r in zip(items, results, strict=True):
            c = p.children
            if c is not None and r.error is None and r.state == _COMPLETED and r.run_at:
                self.admission.stored(list(c.rows), {}, list(c.new_queues))


__all__ = ["ChildAdmission", "children_refused", "history_text", "store_refusal"]
