"""The pool of real values: queue names, job ids, lease ids, idempotency keys and page
tokens that hit real rows, seeded by ``support.fuzz.seeding.seed`` and learned from every
answer; also the requests the server accepted, for ``Requests.mutant``."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, cast

from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor

from support.fuzz.rpcs import Message, Rpc

#: Pool kinds and the string fields (by name) that draw from them most of the time.
HINTS: dict[str, str] = {
    "queue": "queue", "queues": "queue", "name": "queue",
    "job_id": "job_id", "id": "job_id", "lease_id": "lease_id",
    "key": "key", "idempotency_key": "key", "job_type": "job_type",
    "page_token": "token", "next_page_token": "token",
    "reason_prefix": "reason", "dead_letter": "reason", "reason": "reason",
    "encoding": "encoding", "allowed_encodings": "encoding",
}

_POOL_SIZE = 64


class Pool:
    """Strings that hit real rows, by kind (``queue``, ``job_id``, ``lease_id``, ``key``,
    ``job_type``, ``token``, ``reason``, ``encoding``). Bounded (the last 64 per kind);
    thread-safe. ``pick(kind, i)`` is ``i`` modulo the kind's size, so hypothesis draws an
    index (deterministic) and the value follows the server's current rows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        kinds = set(HINTS.values())
        self._values: dict[str, deque[str]] = {kind: deque(maxlen=_POOL_SIZE) for kind in kinds}
        self._sticky: dict[str, deque[str]] = {kind: deque(maxlen=_POOL_SIZE) for kind in kinds}
        self._pairs: deque[tuple[str, str]] = deque(maxlen=_POOL_SIZE)
        self._corpus: dict[str, deque[bytes]] = {}
        self.add("reason", "NACK_DEAD_LETTER", "ATTEMPTS_EXHAUSTED", "LEASE_EXPIRED", "NACK", sticky=True)
        self.add("encoding", "application/json", "text/plain", sticky=True)
        self.add("job_type", "email", "report", sticky=True)

    def add(self, kind: str, *values: str, sticky: bool = False) -> None:
        """Remember ``values`` (empty strings are ignored). Sticky values (the seeded rows)
        are kept apart and are never pushed out by learned ones."""
        with self._lock:
            bucket = (self._sticky if sticky else self._values)[kind]
            for value in values:
                if value and value not in bucket:
                    bucket.append(value)

    def pick(self, kind: str, index: int) -> str:
        """A sticky value for even ``index``, a learned one for odd (``index // 2`` modulo their
        number; the other bucket when one is empty); ``""`` when the kind has none."""
        with self._lock:
            first, other = self._sticky[kind], self._values[kind]
            if index % 2:
                first, other = other, first
            bucket = first or other
            return bucket[(index // 2) % len(bucket)] if bucket else ""

    def pair(self, index: int) -> tuple[str, str]:
        """A (job id, lease id) pair of one of the last 16 Reservations seen (``index`` modulo)."""
        with self._lock:
            recent = min(len(self._pairs), 16)  # the newest are the most likely to be current still
            return self._pairs[-1 - index % recent] if recent else ("", "")

    def any(self, index: int) -> str:
        """A value of any kind (index picks the kind, then the value)."""
        kinds = sorted(self._values)
        return self.pick(kinds[index % len(kinds)], index // len(kinds))

    def keep(self, rpc: Rpc, request: Message) -> None:
        """Remember a request the server answered OK (at most 64 KiB; the last 32 per RPC):
        :meth:`Requests.mutant` changes one field of one."""
        data = request.SerializeToString()
        if len(data) <= 64 * 1024:
            with self._lock:
                self._corpus.setdefault(rpc.path, deque(maxlen=32)).append(data)

    def kept(self, rpc: Rpc, index: int) -> Message:
        """A copy of a kept request of ``rpc`` (``index`` modulo their number); empty when none."""
        cls = message_factory.GetMessageClass(rpc.input)
        with self._lock:
            bucket = self._corpus.get(rpc.path)
            data = bucket[index % len(bucket)] if bucket else b""
        return cls.FromString(data)

    def learn(self, answer: Message, depth: int = 0) -> None:
        """Remember the ids, lease ids, page tokens and names an answer carries."""
        if depth > 4:
            return
        fields = answer.DESCRIPTOR.fields_by_name
        if "lease_id" in fields and "job" in fields:  # a Reservation: a lease that is current
            reservation = cast(Any, answer)
            job_id, lease_id = reservation.job.id, reservation.lease_id
            if job_id and lease_id:
                with self._lock:
                    self._pairs.append((job_id, lease_id))
        for field, value in answer.ListFields():
            if field.message_type is not None:
                if field.message_type.GetOptions().map_entry:
                    continue
                for item in (value if field.is_repeated else [value]):
                    self.learn(item, depth + 1)
            elif field.type == FieldDescriptor.TYPE_STRING and field.name in HINTS and not field.is_repeated:
                self.add(HINTS[field.name], value)
