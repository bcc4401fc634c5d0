"""The hand-encoded batch (``sepp.client._fastwire``) is, over generated inputs, exactly what
the plain protobuf path builds, and declines whatever it does not write.

* ``lean_jobs`` (through ``_info.lean_batch``): the bytes are
  ``EnqueueBatchRequest(jobs=[r.to_proto() for r in reqs]).SerializeToString()`` when every
  request is plain and passes local validation, else ``None``;
* ``plain_runs`` (to a server that reads jobs by column): the bytes are the serialized
  ``EnqueueBatchRequest`` protobuf builds from ``PlainJobs`` runs, one per stretch of
  requests with the same queue, job type and encoding;
* ``varint`` is protobuf's varint.

Generated: queue and job type names (ASCII, unicode, NUL, at and past their length limits),
payload sizes at and past a queue's cap (absent, empty, long), encodings, and the knobs that
make a request not plain (custom entries, priorities, idempotency keys, attempts, a schedule).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _fastwire, _info
from sepp.limits import QueueLimits, QueueSettings, ServerLimits
from sepp.request import EnqueueRequest, Payload, QueueInfo, ServerInfo
from sepp.validation import Validator

#: Declared queues and their payload caps (bytes).
CAPS = {"q": 64, "é": 300, "z": 0}
def text(max_size: int, min_size: int = 0) -> st.SearchStrategy[str]:
    """Unicode text (no lone surrogates: a ``str`` protobuf cannot encode)."""
    return st.text(st.characters(exclude_categories=["Cs"]), min_size=min_size, max_size=max_size)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

def mostly(valid: list[str], invalid: list[str], size: int) -> st.SearchStrategy[str]:
    """Mostly one of ``valid`` (so that many batches are written), else one of ``invalid`` or
    any text up to ``size`` characters."""
    return st.integers(0, 19).flatmap(
        lambda k: st.sampled_from(valid) if k < 16 else st.sampled_from(invalid) if k < 18 else text(size))


names = mostly(["q", "emails.high", "undeclared", "z"], ["é", "a\x00b", "q" * 128, "q" * 129], 6)
job_types = mostly(["t", "mail.send", "t" * 256], ["\u2603", "t" * 257, ""], 6)
encodings = mostly(["", "application/json", "e" * 128], ["é", "e" * 129], 4)
payloads = st.one_of(st.none(), st.builds(Payload, st.binary(max_size=8), encodings),
                     st.builds(Payload, st.binary(max_size=8), encodings),
                     st.builds(Payload, st.integers(0, 310).map(bytes), encodings))


@st.composite
def requests(draw: st.DrawFn) -> EnqueueRequest:
    """One request: plain most of the time, else with one or more knobs set."""
    kw: dict[str, Any] = {"payload": draw(payloads)}
    if draw(st.integers(0, 15)) == 7:
        kw["custom"] = draw(st.dictionaries(text(3), st.one_of(st.integers(-(2**63), 2**63 - 1), text(3)),
                                            min_size=1, max_size=2))
    if draw(st.integers(0, 15)) == 7:
        kw["priority"] = draw(st.integers(0, 9))
    if draw(st.integers(0, 20)) == 7:
        kw["idempotency_key"] = draw(text(4, min_size=1))
    if draw(st.integers(0, 20)) == 7:
        kw["max_attempts"] = draw(st.integers(1, 5))
    if draw(st.integers(0, 20)) == 7:
        kw["scheduled_at"] = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=draw(st.integers(1, 10**9)))
    return EnqueueRequest(draw(names), draw(job_types), **kw)


def cached(strict: bool, plain_wire: bool) -> _info.CachedInfo:
    queues = {name: QueueInfo(name, QueueSettings(limits=QueueLimits(max_payload_bytes=cap)))
              for name, cap in CAPS.items()}
    info = ServerInfo("1", frozenset(), "group", strict, ServerLimits(), QueueSettings(), queues)
    return _info.CachedInfo(info, Validator(info.limits, info.queue_limits), time.monotonic(), plain_wire=plain_wire)


def passes(info: _info.CachedInfo, reqs: list[EnqueueRequest]) -> bool:
    """Whether the plain path sends every request (each plain, each passing the validator)."""
    verdicts = _info.validate_all(info, [r.to_proto() for r in reqs])
    return all(v is None for v in verdicts) and all(_fastwire.is_plain(r) for r in reqs)


def runs(reqs: list[EnqueueRequest]) -> ppb.EnqueueBatchRequest:
    """The by-column message protobuf builds: one ``PlainJobs`` per stretch of one shape."""
    message = ppb.EnqueueBatchRequest()
    last: tuple[str, str, str] | None = None
    for req in reqs:
        enc, data = ("", b"") if req.payload is None else (req.payload.encoding, req.payload.data)
        if (req.queue, req.job_type, enc) != last:
            last = (req.queue, req.job_type, enc)
            message.plain.add(queue=req.queue, job_type=req.job_type, encoding=enc)
        message.plain[-1].data.append(data)
    return message


@SETTINGS
@given(st.lists(requests(), min_size=1, max_size=4), st.booleans(), st.booleans())
def test_the_hand_written_batch_is_the_message_protobuf_serializes_or_declined(
        reqs: list[EnqueueRequest], strict: bool, plain_wire: bool) -> None:
    """``lean_jobs`` (jobs, field by field) or ``plain_runs`` (by column, to a server with
    ``plain_wire``): the bytes protobuf serializes for the same message, or ``None``."""
    wire = _info.lean_batch(cached(strict, plain_wire), reqs)
    if passes(cached(strict, plain_wire), reqs):
        expected = runs(reqs) if plain_wire else ppb.EnqueueBatchRequest(jobs=[r.to_proto() for r in reqs])
        assert wire == expected.SerializeToString()
        assert ppb.EnqueueBatchRequest.FromString(wire) == expected
        event("written")
    else:
        assert wire is None
        event("declined")


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["q", "emails.high"]), st.sampled_from(["t", "mail.send"]),
                          st.integers(0, 64)), min_size=1, max_size=40))
def test_long_batches_of_a_few_shapes_are_written_as_protobuf_writes_them(shapes: list[tuple[str, str, int]]) -> None:
    reqs = [EnqueueRequest(q, t, payload=Payload(b"\xff" * size, "application/json")) for q, t, size in shapes]
    assert _info.lean_batch(cached(False, False), reqs) == ppb.EnqueueBatchRequest(
        jobs=[r.to_proto() for r in reqs]).SerializeToString()
    assert _info.lean_batch(cached(False, True), reqs) == runs(reqs).SerializeToString()


@given(st.integers(0, 2**63 - 1))
def test_varint_is_protobufs(n: int) -> None:
    # Rejection.limit: optional int64, field 4 (tag 0x20), written even when 0.
    assert pb.Rejection(limit=n).SerializeToString() == b"\x20" + _fastwire.varint(n)
