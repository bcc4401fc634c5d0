"""What the admin operations check and how they refuse: ``StateConflict`` (the target's
state does not allow the operation), the state names its messages use, the queue lookup
(``NotFound``) and the job-id parse (``InvalidRequest``).

Shared by the admin's parts (``jobs``, ``queue_changes``, ``stats``, ``bulk``) and by its
front ends (the gRPC ``AdminService`` maps ``StateConflict`` to FAILED_PRECONDITION, the UI
shows it as a refusal).
"""

from __future__ import annotations

from collections.abc import Mapping

from sepp.domain.ids import job_id_bytes
from sepp.domain.states import STATE_NAMES
from sepp.quoting import quote
from sepp.rejections import Reason
from sepp.server.errors import EngineError, InvalidRequest, NotFound
from sepp.server.queues import QueueRegistry, QueueState


class StateConflict(EngineError):
    """The target's state does not allow the operation (FAILED_PRECONDITION).

    ``reason`` is ``JOB_STATE`` or ``QUEUE_NOT_EMPTY``; ``metadata`` goes into the ErrorInfo.
    """

    def __init__(self, reason: Reason, message: str, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.metadata = dict(metadata or {})


def state_name(state: int) -> str:
    """``READY``, ``DEAD_LETTERED``, …; ``UNKNOWN`` for anything else: the UPPERCASE spelling
    of ``StateConflict`` messages and their ``state`` metadata (wire strings) and of the
    admin UI. Read from the one name table (``sepp.domain.states.STATE_NAMES``); not
    ``domain.states.state_name`` itself, which spells ``dead_lettered`` and an unknown
    number as its digits."""
    name = STATE_NAMES.get(state)
    return "UNKNOWN" if name is None else name.upper()


def existing_queue(queues: QueueRegistry, name: str) -> QueueState:
    """The queue ``name`` of ``queues``, or ``NotFound`` (QUEUE_NOT_FOUND)."""
    q = queues.get(name)
    if q is None:
        raise NotFound(f"queue {quote(name)} does not exist", Reason.QUEUE_NOT_FOUND)
    return q


def parse_job_id(text: str) -> bytes:
    """The 16-byte id of a job id's text form; ``InvalidRequest`` (field ``job_id``) when
    ``text`` is not a UUID."""
    raw = job_id_bytes(text)
    if raw is None:
        raise InvalidRequest(f"job_id {quote(text)} is not a UUID", "job_id")
    return raw
