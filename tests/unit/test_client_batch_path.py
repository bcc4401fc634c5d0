"""The client's lean ``enqueue_batch`` path gives exactly what the plain path gives (the
enqueue benchmark's fast path, docs/decisions.md "Batched enqueue: cost per job").

* ``_core.batch_message(reqs)`` is the same message as ``EnqueueBatchRequest(jobs=[r.to_proto()
  for r in reqs])`` — byte for byte, empty payloads and requests with every knob included;
* ``_core.validate_requests(cached, reqs)`` (a per-(queue, job type, encoding) memo of the
  validator's verdict plus the payload size) gives the validator's own verdicts, on a lax
  server and on a strict one with declared queues and tight limits;
* ``_core.lean_batch(cached, reqs)`` (the common batch written as bytes in one pass) is
  ``batch_message(reqs).SerializeToString()`` when every job is plain and valid, else ``None``;
  to a server that reads jobs by column, it is the ``EnqueueBatchRequest.plain`` runs whose
  jobs are those requests (``expand_plain``), one run per stretch of one shape;
* ``Payload.json`` produces ``json.dumps(…, ensure_ascii=False, separators=(",", ":"),
  allow_nan=False)``'s bytes and raises its errors.

Seeded random requests (thousands per test, well under a second), boundaries included:
payloads of 0, 1, 127, 128 bytes and one over a queue's cap, NUL and non-ASCII in names and
labels, names over their length limits.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import random
import time
from typing import Any

import pytest

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _core
from sepp.limits import QueueLimits, QueueSettings, ServerLimits
from sepp.request import EnqueueRequest, Payload, QueueInfo, ServerInfo
from sepp.server.admission import expand_plain
from sepp.validation import Validator

_ALPHABETS = ["abc", "aé\u2603._:-Z9", "\x00\x01a", "x"]


def _cached(strict: bool, queues: dict[str, QueueInfo], plain_wire: bool = False) -> _core.CachedInfo:
    info = ServerInfo("1", frozenset(), "group", strict, ServerLimits(), QueueSettings(), queues)
    return _core.CachedInfo(info, Validator(info.limits, info.queue_limits), time.monotonic(), plain_wire=plain_wire)


def _request(rnd: random.Random, alphabets: list[str]) -> EnqueueRequest:
    def text(n: int) -> str:
        alphabet = rnd.choice(alphabets)
        return "".join(rnd.choice(alphabet) for _ in range(n))

    kw: dict[str, Any] = {}
    if rnd.random() < 0.8:
        size = rnd.choice([0, 1, 10, 11, 100, 101, 127, 128, 300])
        kw["payload"] = Payload(bytes(rnd.getrandbits(8) for _ in range(size)),
                                rnd.choice(["", "application/json", "x" * 200, "a\x00b", "é"]))
    if rnd.random() < 0.15:
        kw["priority"] = rnd.choice([0, 5, 9])
    if rnd.random() < 0.1:
        kw["custom"] = {"a": 1}
    if rnd.random() < 0.1:
        kw["idempotency_key"] = rnd.choice(["k", "a\x00"])
    if rnd.random() < 0.05:
        kw["scheduled_at"] = dt.datetime.now(dt.UTC) + dt.timedelta(days=rnd.choice([1, 10000]))
    return EnqueueRequest(text(rnd.choice([1, 5, 128, 129])), text(rnd.choice([1, 3, 256, 257])), **kw)


def _copy(req: EnqueueRequest) -> EnqueueRequest:
    """The same request, built again (its wire message not built yet)."""
    return EnqueueRequest(req.queue, req.job_type, payload=req.payload, custom=req.custom, priority=req.priority,
                          max_attempts=req.max_attempts, scheduled_at=req.scheduled_at,
                          idempotency_key=req.idempotency_key, trace_context=req.trace_context)


def test_the_batch_message_is_the_one_to_proto_builds() -> None:
    rnd = random.Random(1)
    for _ in range(2000):
        reqs = [_request(rnd, _ALPHABETS) for _ in range(rnd.choice([1, 3, 20]))]
        want = ppb.EnqueueBatchRequest(jobs=[r.to_proto() for r in reqs]).SerializeToString()
        fresh = [_copy(r) for r in reqs]
        if rnd.random() < 0.3:  # some with their wire message built already
            fresh[0].to_proto()
        assert _core.batch_message(fresh).SerializeToString() == want
    bare = EnqueueRequest("q", "t")
    empty = EnqueueRequest("q", "t", payload=Payload())
    assert _core.batch_message([bare, empty]) == ppb.EnqueueBatchRequest(jobs=[bare.to_proto(), empty.to_proto()])
    assert not _core.batch_message([bare]).jobs[0].HasField("payload")
    assert _core.batch_message([empty]).jobs[0].HasField("payload")


@pytest.mark.parametrize("strict", [False, True])
def test_the_memoized_verdicts_are_the_validators(strict: bool) -> None:
    queues = {name: QueueInfo(name, QueueSettings(limits=QueueLimits(max_payload_bytes=cap,
                                                                     allowed_encodings=tuple(encodings))))
              for name, encodings, cap in [("abc", ["application/json"], 100), ("x", [], 10), ("a", ["", "é"], 1)]}
    alphabets = ["abc", "x", "a"] if strict else _ALPHABETS
    plain_path, memo_path = _cached(strict, queues), _cached(strict, queues)
    rnd = random.Random(2 + strict)
    rejected = 0
    for _ in range(3000):
        reqs = [_request(rnd, alphabets) for _ in range(rnd.choice([1, 3, 20]))]
        want = _core.validate_all(plain_path, [r.to_proto() for r in reqs])
        assert _core.validate_requests(memo_path, [_copy(r) for r in reqs]) == want
        rejected += sum(v is not None for v in want)
    assert rejected > 100 and memo_path.plain_caps  # the boundaries were crossed, the memo used


@pytest.mark.parametrize("value", [
    {"i": 1}, [1, 2.5, "é\u2603", None, True, False], "plain", "", 0, -1.5e300, {"nested": {"a": [{}]}},
    {"emoji": "\U0001F600", "ctl": "\x00\x1f\"\\"}, [], {}, 2**70,
])
def test_payload_json_is_json_dumps(value: Any) -> None:
    want = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    assert Payload.json(value).data == want
    assert Payload.json(value).encoding == "application/json"


@pytest.mark.parametrize("bad", [math.nan, {"x": math.inf}, {1j: 1}, {"s": {1, 2}}, object()])
def test_payload_json_refuses_what_json_dumps_refuses(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as ours:
        Payload.json(bad)
    with pytest.raises((TypeError, ValueError)) as theirs:
        json.dumps(bad, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert type(ours.value) is type(theirs.value)


def test_payload_json_refuses_a_circular_value() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        Payload.json(loop)
    cycle: dict[str, Any] = {"a": [1]}
    cycle["a"].append(cycle)
    with pytest.raises(ValueError, match="Circular"):
        Payload.json(cycle)  # a dict: the inlined path


def test_payload_json_without_the_circular_check_still_matches_json_dumps() -> None:
    """``Payload.json`` encodes without the circular-reference check and asks the checking
    encoder again only on ``RecursionError``: a value shared (not a cycle) is encoded, one
    nested too deep raises ``RecursionError`` as ``json.dumps`` does, and the encoder still
    works after either."""
    shared = [1, "é"]
    value = {"x": shared, "y": [shared, {"z": shared}]}
    want = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    assert Payload.json(value).data == want
    deep: Any = 1
    for _ in range(100_000):
        deep = {"d": [deep]}
    with pytest.raises(RecursionError):
        json.dumps(deep, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    with pytest.raises(RecursionError):
        Payload.json(deep)
    assert Payload.json(value).data == want


def _lean_request(rnd: random.Random, caps: dict[str, int]) -> EnqueueRequest:
    """Mostly plain, mostly valid requests whose sizes sit at the limits the lean writer meets:
    each queue's payload cap and one past it, name and label lengths at their limits and one
    past, and the lengths where a varint grows a byte (127/128, 16383/16384)."""
    queue = rnd.choice([*caps, "q" * 128, "q" * 129])
    job_type = rnd.choice(["t", "é" * 128, "t" * 256, "t" * 257, "t" * 120])
    kw: dict[str, Any] = {}
    if rnd.random() < 0.9:
        sizes = [0, 1, 2, 100, 127, 128, 129, 16383, 16384]
        if queue in caps:  # (an unlisted queue has the default 1 MiB cap: too slow to cross here)
            sizes += [max(caps[queue] - 1, 0), caps[queue], caps[queue] + 1]
        kw["payload"] = Payload(rnd.randbytes(rnd.choice(sizes)),
                                rnd.choice(["", "application/json", "é", "e" * 128, "e" * 129]))
    if rnd.random() < 0.03:
        kw[rnd.choice(["priority", "max_attempts"])] = 1
    if rnd.random() < 0.02:
        kw["idempotency_key"] = "k"
    return EnqueueRequest(queue, job_type, **kw)


@pytest.mark.parametrize("strict", [False, True])
def test_the_lean_batch_is_the_batch_message_serialized_or_declined(strict: bool) -> None:
    """``lean_batch`` gives ``batch_message(reqs).SerializeToString()`` exactly when every job
    is plain and the validator passes every one, and ``None`` otherwise — at each limit and one
    past it (payload cap, name, job type and label lengths)."""
    caps = {"abc": 100, "x": 16384, "a": 0, "big": 20_000}
    queues = {name: QueueInfo(name, QueueSettings(limits=QueueLimits(
        max_payload_bytes=cap, allowed_encodings=("", "application/json", "é", "e" * 128) if name == "abc" else ())))
        for name, cap in caps.items()}
    general, lean = _cached(strict, queues), _cached(strict, queues)
    rnd = random.Random(10 + strict)
    written = declined = 0
    for _ in range(3000):
        reqs = [_lean_request(rnd, caps) for _ in range(rnd.choice([1, 1, 2, 5]))]
        verdicts = _core.validate_all(general, [r.to_proto() for r in reqs])
        wire = _core.lean_batch(lean, [_copy(r) for r in reqs])
        if all(v is None for v in verdicts) and all(_core._plain(r) for r in reqs):
            assert wire == _core.batch_message(reqs).SerializeToString()
            assert ppb.EnqueueBatchRequest.FromString(wire) == ppb.EnqueueBatchRequest(
                jobs=[r.to_proto() for r in reqs])
            written += 1
        else:
            assert wire is None
            declined += 1
    assert written > 300 and declined > 300 and lean.shapes


def test_the_lean_batch_keeps_an_empty_payload_and_the_serializer_passes_bytes() -> None:
    cached = _cached(False, {})
    bare, empty = EnqueueRequest("q", "t"), EnqueueRequest("q", "t", payload=Payload())
    wire = _core.lean_batch(cached, [bare, empty, bare])
    assert wire == _core.batch_message([bare, empty, bare]).SerializeToString()
    assert wire is not None
    jobs = ppb.EnqueueBatchRequest.FromString(wire).jobs
    assert [job.HasField("payload") for job in jobs] == [False, True, False]
    assert _core.serialize_batch_request(wire) is wire
    message = _core.batch_message([empty])
    assert _core.serialize_batch_request(message) == message.SerializeToString()
    # A subclass (its to_proto may differ) and a request that is not plain are not written.
    class Mine(EnqueueRequest):
        __slots__ = ()

    assert _core.lean_batch(cached, [bare, Mine("q", "t")]) is None
    assert _core.lean_batch(cached, [bare, EnqueueRequest("q", "t", priority=5)]) is None


@pytest.mark.parametrize("strict", [False, True])
def test_the_plain_batch_is_the_requests_by_column_or_declined(strict: bool) -> None:
    """To a server with ``plain_wire``, ``lean_batch`` writes the serialized message whose
    ``plain`` runs stand for exactly the requests (``expand_plain``; an absent payload is an
    empty one), one run per stretch of consecutive requests of one shape, when every job is
    plain and valid; ``None`` otherwise — at each limit and one past it."""
    caps = {"abc": 100, "x": 16384, "a": 0, "big": 20_000}
    queues = {name: QueueInfo(name, QueueSettings(limits=QueueLimits(
        max_payload_bytes=cap, allowed_encodings=("", "application/json", "é", "e" * 128) if name == "abc" else ())))
        for name, cap in caps.items()}
    general, lean = _cached(strict, queues), _cached(strict, queues, plain_wire=True)
    rnd = random.Random(20 + strict)
    written = declined = 0
    for _ in range(3000):
        reqs = [_lean_request(rnd, caps) for _ in range(rnd.choice([1, 1, 2, 5]))]
        if rnd.random() < 0.3:
            reqs += [_copy(reqs[-1])] * rnd.choice([1, 3])  # a longer run of one shape
        verdicts = _core.validate_all(general, [r.to_proto() for r in reqs])
        wire = _core.lean_batch(lean, [_copy(r) for r in reqs])
        if all(v is None for v in verdicts) and all(_core._plain(r) for r in reqs):
            assert wire is not None
            message = ppb.EnqueueBatchRequest.FromString(wire)
            assert message.SerializeToString() == wire and not message.jobs
            assert expand_plain(message.plain) == [
                pb.EnqueueRequest(queue=r.queue, job_type=r.job_type, payload=pb.Payload(
                    data=r.payload.data if r.payload is not None else b"",
                    encoding=r.payload.encoding if r.payload is not None else ""))
                for r in reqs]
            shapes = [(run.queue, run.job_type, run.encoding) for run in message.plain]
            assert all(a != b for a, b in itertools.pairwise(shapes)) and all(r.data for r in message.plain)
            written += 1
        else:
            assert wire is None
            declined += 1
    assert written > 300 and declined > 300 and lean.shapes


def test_the_plain_batch_writes_long_payloads_and_empty_ones() -> None:
    cached = _cached(False, {}, plain_wire=True)
    sizes = [0, 1, 1023, 1024, 16384, 200_000]
    reqs = [EnqueueRequest("q", "t", payload=Payload(b"x" * n, "e")) for n in sizes] + [EnqueueRequest("q", "t")]
    wire = _core.lean_batch(cached, reqs)
    assert wire is not None
    runs = ppb.EnqueueBatchRequest.FromString(wire).plain
    assert [(r.encoding, [len(d) for d in r.data]) for r in runs] == [("e", sizes), ("", [0])]
