"""The client's hand-encoded protobuf: one home for the bytes it writes and reads by hand.

Two paths skip protobuf where a bulk producer spends its time, each the same bytes (or the
same results) as the plain protobuf path, for every input (tests/unit/test_fastwire.py):

* **Writing** an ``EnqueueBatchRequest`` of *plain* requests (``is_plain``: queue, job type
  and payload only) in one pass: ``lean_jobs`` gives exactly
  ``batch_message(requests).SerializeToString()``; ``plain_runs`` gives the message whose
  ``plain`` runs (``PlainJobs``, feature ``PLAIN_FEATURE``) stand for the same jobs. Both
  take ``shape_of(queue, job_type, encoding)``: the ``Shape`` of such requests (their
  payload cap and the bytes around the data), or ``None`` when such a request fails local
  validation — then they decline (``None``) and the caller takes the general path.
* **Reading** an ``EnqueueBatchResponse`` whose every result is a fresh ack of a canonical
  id (what the server writes by hand: ``server.rpc.producer.acks_wire``):
  ``parse_batch_response`` gives ``FreshAcks``, the ids, instead of the parsed message.

protobuf's encoding of a plain job (proto3: an empty string or bytes field is not written;
a payload that is present is, even empty)::

    jobs (1, length-delimited)  0x0a <len> queue: 0x0a <len> <utf-8>  job_type: 0x12 <len> <utf-8>
                                           payload (3): 0x1a <len> [data: 0x0a <len> <bytes>]
                                                                   [encoding: 0x12 <len> <utf-8>]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc as ppb_grpc
from sepp.request import _EMPTY, EnqueueRequest
from sepp.wire import varint as varint  # re-exported: the shared varint

#: The ``ServerInfo`` feature of a server that reads ``EnqueueBatchRequest.plain``.
PLAIN_FEATURE = "enqueue_batch_plain"


def is_plain(req: EnqueueRequest) -> bool:
    """Whether ``req`` carries nothing but queue, job type and payload (and is no subclass,
    whose ``to_proto`` may differ). ``lean_jobs`` and ``plain_runs`` inline this test."""
    return (type(req) is EnqueueRequest and req.custom is _EMPTY and req.trace_context is _EMPTY
            and req.priority is None and req.max_attempts is None and req.scheduled_at is None
            and req.idempotency_key is None and not req.depends_on)


def field(tag: int, data: bytes) -> bytes:
    """A length-delimited field (``tag`` = field number << 3 | 2); ``b""`` for empty ``data``
    (proto3 writes no empty string or bytes field)."""
    return bytes((tag,)) + varint(len(data)) + data if data else b""


class Shape:
    """What the batch writer keeps per (queue, job type, encoding) of plain requests that pass
    every check but the size: the size cap ``cap`` (bytes of data), the job written without
    a payload (``bare``), and per data length (≤ the cap) the bytes before the data
    (``head``); the encoding field (``tail``) follows it. ``run`` is the head of a
    ``PlainJobs`` run of such jobs (queue, job type, encoding)."""

    __slots__ = ("bare", "cap", "heads", "names", "run", "tail")

    def __init__(self, queue: str, job_type: str, encoding: str, cap: int) -> None:
        self.cap = cap
        self.names = field(0x0A, queue.encode("utf-8")) + field(0x12, job_type.encode("utf-8"))
        self.bare = b"\x0a" + varint(len(self.names)) + self.names
        self.tail = field(0x12, encoding.encode("utf-8"))
        self.run = self.names + field(0x1A, encoding.encode("utf-8"))
        self.heads: dict[int, bytes] = {}

    def head(self, size: int) -> bytes:
        """The bytes of a job with ``size`` bytes of data that come before the data (memoized
        for up to ``HEADS_MAX`` sizes)."""
        head = self.heads.get(size)
        if head is None:
            data_field = b"\x0a" + varint(size) if size else b""
            payload_len = len(data_field) + size + len(self.tail)
            payload = b"\x1a" + varint(payload_len)
            job_len = len(self.names) + len(payload) + payload_len
            head = b"\x0a" + varint(job_len) + self.names + payload + data_field
            if len(self.heads) < HEADS_MAX:
                self.heads[size] = head
        return head


#: Data lengths a ``Shape`` memoizes the head of (the rest are built per job).
HEADS_MAX = 4096

#: ``shape_of(queue, job_type, encoding)``: the ``Shape`` of plain requests of that kind, or
#: ``None`` when such a request fails a local check other than the payload size.
ShapeOf = Callable[[str, str, str], "Shape | None"]

#: ``PlainJobs.data`` field heads (tag 4, wire type 2, then the length) for lengths below 1,024.
_DATA_HEADS = tuple(b"\x22" + varint(n) for n in range(1024))


def lean_jobs(requests: Sequence[EnqueueRequest], shape_of: ShapeOf) -> bytes | None:
    """The serialized ``EnqueueBatchRequest`` of ``requests`` — exactly
    ``batch_message(requests).SerializeToString()`` — when every one is plain (``is_plain``)
    and passes local validation (``shape_of`` knows its kind, its data within the cap);
    ``None`` otherwise (the caller takes the general path, which finds the rejections)."""
    parts: list[bytes] = []
    append = parts.append
    shape: Shape | None = None
    queue = job_type = encoding = ""
    for req in requests:
        if not (type(req) is EnqueueRequest and req.custom is _EMPTY and req.trace_context is _EMPTY
                and req.priority is None and req.max_attempts is None and req.scheduled_at is None
                and req.idempotency_key is None and not req.depends_on):
            return None  # not plain: ``is_plain``, inlined
        payload = req.payload
        enc = "" if payload is None else payload.encoding
        if shape is None or req.queue != queue or req.job_type != job_type or enc != encoding:
            queue, job_type, encoding = req.queue, req.job_type, enc
            shape = shape_of(queue, job_type, encoding)
            if shape is None:
                return None
        if payload is None:
            append(shape.bare)
            continue
        data = payload.data
        head = shape.heads.get(len(data))
        if head is None:
            if len(data) > shape.cap:
                return None
            head = shape.head(len(data))
        append(head)
        append(data)
        append(shape.tail)
    return b"".join(parts)


def plain_runs(requests: Sequence[EnqueueRequest], shape_of: ShapeOf) -> bytes | None:
    """``lean_jobs`` by column: the serialized ``EnqueueBatchRequest`` whose ``plain`` runs
    hold ``requests`` — one ``PlainJobs`` per stretch of consecutive requests with the same
    queue, job type and encoding — when every request is plain and passes local validation;
    ``None`` otherwise (and for no request at all). The bytes are what ``SerializeToString``
    of that message gives; the server stores each job as the ``EnqueueRequest`` it stands for."""
    out: list[bytes] = []
    parts: list[bytes] = []
    append = parts.append
    shape: Shape | None = None
    queue = job_type = encoding = ""
    heads = _DATA_HEADS
    n_heads = len(heads)
    for req in requests:
        if not (type(req) is EnqueueRequest and req.custom is _EMPTY and req.trace_context is _EMPTY
                and req.priority is None and req.max_attempts is None and req.scheduled_at is None
                and req.idempotency_key is None and not req.depends_on):
            return None  # not plain: ``is_plain``, inlined
        payload = req.payload
        if payload is None:
            enc, data = "", b""
        else:
            enc, data = payload.encoding, payload.data
        if shape is None or req.queue != queue or req.job_type != job_type or enc != encoding:
            if shape is not None:
                _close_run(out, shape, parts)
                parts = []
                append = parts.append
            queue, job_type, encoding = req.queue, req.job_type, enc
            shape = shape_of(queue, job_type, encoding)
            if shape is None:
                return None
        size = len(data)
        if size > shape.cap:
            return None
        append(heads[size] if size < n_heads else b"\x22" + varint(size))
        append(data)
    if shape is None:
        return None
    _close_run(out, shape, parts)
    return b"".join(out)


def _close_run(out: list[bytes], shape: Shape, parts: list[bytes]) -> None:
    """Append to ``out`` the ``plain`` field (number 2) of one run: ``shape.run`` and ``parts``
    (its data fields)."""
    out.append(b"\x12" + varint(len(shape.run) + sum(map(len, parts))))
    out.append(shape.run)
    out.extend(parts)


def serialize_batch_request(request: ppb.EnqueueBatchRequest | bytes) -> bytes:
    """The ``EnqueueBatch`` request serializer: bytes (``lean_jobs``, ``plain_runs``) go as
    they are, a message is serialized."""
    return request if type(request) is bytes else request.SerializeToString()  # type: ignore[union-attr]


# ----------------------------------------------------------------- the answer read by hand

#: Bytes of each result of a serialized ``EnqueueBatchResponse`` whose every result is an
#: ``EnqueueAck`` with a 36-character id and ``deduplicated`` false, in protobuf's encoding
#: (what sepp's server sends for such a batch: ``rpc.producer.acks_wire``).
_ACK_SIZE = 42
#: What precedes each id: results (1) of length 40, ack (1) of length 38, job_id (1) of length 36.
_ACK_HEAD = b"\n(\n&\n$"
#: The bytes of a canonical id; none of them occurs in ``_ACK_HEAD``.
_ID_BYTES = b"0123456789abcdef-"


class FreshAcks(list[str]):
    """The job ids of a batch answer in which every job got a fresh ack (no rejection, no
    deduplication), in order: what ``parse_batch_response`` gives for such an answer."""

    __slots__ = ()


def parse_batch_response(data: bytes) -> ppb.EnqueueBatchResponse | FreshAcks:
    """The deserializer of ``EnqueueBatch`` answers: ``FreshAcks`` when ``data`` is exactly the
    encoding of fresh acks with canonical ids (lower-case hex digits and dashes; read by a few
    C calls over the whole answer: a small part of parsing the message and reading each
    result), else the parsed message.
    Raises what ``EnqueueBatchResponse.FromString`` raises for bytes that do not parse."""
    count, rest = divmod(len(data), _ACK_SIZE)
    # Without the id bytes, exactly ``count`` heads are left: the bytes are heads and id bytes,
    # and the id bytes between two heads are an id (no head byte is an id byte). Split at the
    # heads, the first piece is empty and the other ``count`` hold 36 × count bytes in all: if
    # none is shorter than 36, each is an id of 36 (C calls only: a tenth of a regex's cost).
    # Fewer pieces: a head split by an id byte (not protobuf's layout; one piece holds head
    # bytes), however long the pieces.
    if count and not rest and data.translate(None, _ID_BYTES) == _ACK_HEAD * count:
        ids = data.decode("ascii").split(_ACK_TEXT_HEAD)
        if not ids[0] and len(ids) == count + 1:
            del ids[0]
            if min(map(len, ids)) == 36:
                return FreshAcks(ids)
    return ppb.EnqueueBatchResponse.FromString(data)


_ACK_TEXT_HEAD = _ACK_HEAD.decode("ascii")


def producer_stub(channel: Any) -> Any:
    """The ``ProducerService`` stub on ``channel`` (sync or aio), its ``EnqueueBatch`` answers
    read by ``parse_batch_response`` and its requests written by ``serialize_batch_request``
    (a message, or the bytes ``lean_batch`` wrote)."""
    stub = ppb_grpc.ProducerServiceStub(channel)
    stub.EnqueueBatch = channel.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch",
                                            request_serializer=serialize_batch_request,
                                            response_deserializer=parse_batch_response)
    return stub


__all__ = ["HEADS_MAX", "PLAIN_FEATURE", "FreshAcks", "Shape", "ShapeOf", "field", "is_plain", "lean_jobs",
           "parse_batch_response", "plain_runs", "producer_stub", "serialize_batch_request", "varint"]
