"""JobEngine: the queue semantics, transport-agnostic — a thin facade over admission
(``sepp.server.admission``), leasing (``sepp.server.leasing``), settlement
(``sepp.server.settlement``), waiting for jobs (``sepp.server.waiting``) and a handler's
read of its dependencies (``sepp.server.dependency_reads``), built over one
``ServerParts``.

The RPC layer hands it protobuf requests; errors are ``sepp.server.errors`` exceptions that
``rpc.status`` maps to the wire. It holds no part of its own: services that need the clock,
the store, the queues, the notifier, the events or the limits take them from
``ServerParts``, not from the engine.
"""

from __future__ import annotations

from sepp.server.admission import Admission
from sepp.server.children import ChildAdmission
from sepp.server.dependency_reads import DependencyReads
from sepp.server.leasing import Leasing
from sepp.server.parts import ServerParts
from sepp.server.settlement import Settlement
from sepp.server.waiting import Waiting
from sepp.server.workflows import WorkflowAdmission


class JobEngine:
    """Enqueue, reserve and settle on top of ``parts.store``: each operation is the bound
    method of the service that does it (no extra call on the hot paths).

    - admission (``Admission``): ``enqueue``, ``enqueue_batch``, ``enqueue_atomic``, and
      ``enqueue_workflow`` (``WorkflowAdmission`` over it);
    - leasing (``Leasing``): ``reserve``, ``parked``, ``stop_reserving``, ``end_long_polls``,
      ``release``, ``give_back``, ``bury_damaged``, ``quiesce``;
    - settlement (``Settlement``): ``settle``, ``settle_one``, ``extend``; the children an
      ack carries (``ChildAdmission``): ``attach_children`` before the settle, ``children_told``
      after it;
    - waiting for jobs (``Waiting``, as ``waits``): ``wait_jobs``, ``waits_parked``, ``end_waits``;
    - a handler's read of its dependencies (``DependencyReads``): ``dependency_outcomes``.

    ``parts`` is what it was built over. Services are handed the same ``ServerParts`` by
    whoever builds them (``sepp.server.app``, a test harness), never take it from the engine.
    """

    def __init__(self, parts: ServerParts) -> None:
        self.parts = parts
        self.admission = admission = Admission(parts)
        self.settlement = settlement = Settlement(parts)
        self.leasing = leasing = Leasing(parts, settlement)
        self.enqueue = admission.enqueue
        self.enqueue_batch = admission.enqueue_batch
        self.enqueue_atomic = admission.enqueue_atomic
        self.enqueue_workflow = WorkflowAdmission(admission).enqueue_workflow
        children = ChildAdmission(admission)
        self.attach_children = children.attach
        self.children_told = children.told
        self.reserve = leasing.reserve
        self.parked = leasing.parked
        self.stop_reserving = leasing.stop_reserving
        self.end_long_polls = leasing.end_long_polls
        self.release = leasing.release
        self.give_back = leasing.give_back
        self.bury_damaged = leasing.bury_damaged
        self.quiesce = leasing.quiesce
        self.settle = settlement.settle
        self.settle_one = settlement.settle_one
        self.extend = settlement.extend
        self.waits = waits = Waiting(parts)
        self.wait_jobs = waits.wait_jobs
        self.waits_parked = waits.waiting
        self.end_waits = waits.end_waits
        self.dependency_outcomes = DependencyReads(parts).dependency_outcomes


__all__ = ["JobEngine"]
