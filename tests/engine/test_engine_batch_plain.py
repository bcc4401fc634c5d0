"""The batched enqueue's plain-request path (``JobEngine.enqueue_batch``: a memo of the
verdict per queue, job type and encoding) answers exactly what ``Validator.check`` answers
request by request, and stores the rows ``_build`` builds."""

from __future__ import annotations

from engine.engine_kit import HarnessFactory, request
from sepp.api.v1 import common_pb2 as pb
from sepp.server.engine import job_id_bytes


def plain(queue: str, data: bytes = b"{}", encoding: str = "application/json", job_type: str = "t"
          ) -> pb.EnqueueRequest:
    """A request with nothing but queue, job type and payload."""
    return pb.EnqueueRequest(queue=queue, job_type=job_type, payload=pb.Payload(data=data, encoding=encoding))


def mixed_batch() -> list[pb.EnqueueRequest]:
    """Plain requests that pass and fail each check a plain request can fail, between
    non-plain ones, several with the same (queue, job type, encoding)."""
    keyed = request("q", key="k1")
    keyed.payload.data = b"x"
    urgent = request("q", priority=7)
    for req in (keyed, urgent):
        req.payload.encoding = "application/json"
    return [
        plain("q"), plain("q", b"x" * 10), plain("q", b"x" * 11),  # at the size limit, one past it
        plain("q", encoding="text/plain"),  # not an allowed encoding
        plain("q", encoding="a\x00b"),  # NUL in the label
        plain("nope"), plain(""), plain("bad name!"), plain("q", job_type=""), plain("q", job_type="a\x01"),
        urgent, keyed, request("q", priority=12),
        plain("q"), plain("q", b""), pb.EnqueueRequest(queue="q", job_type="t"),  # no payload at all
        plain("q", b"x" * 11), plain("r", b"y", ""), plain("r", b"z" * 10_000, ""),
    ]


async def test_plain_path_verdicts_equal_the_full_check(make_harness: HarnessFactory) -> None:
    queues = {"q": {"limits": {"max_payload_bytes": 10, "allowed_encodings": ["application/json"]}},
              "r": {"limits": {"max_payload_bytes": 100}}}
    h = await make_harness(queues, strict=True)
    ref = await make_harness(queues, strict=True)
    batch = mixed_batch()
    results = await h.engine.enqueue_batch(batch)
    ref.engine.queues.begin_admission()
    expected = [ref.engine.validator.check(r, ref.now * 1000) for r in batch]
    assert len(results) == len(expected)
    for got, want in zip(results, expected, strict=True):
        if type(want) is pb.Rejection:
            assert got == want
        else:
            assert type(got) is tuple and got[1] is False
    stored = [(req, got) for req, got in zip(batch, results, strict=True) if type(got) is tuple]
    assert len(stored) == sum(type(w) is not pb.Rejection for w in expected) == 7
    for req, (text, _dedup) in stored:
        raw = job_id_bytes(text)
        assert raw is not None
        job = await h.job(raw)
        assert (job.queue, job.job_type, job.payload, job.encoding) == (
            req.queue, req.job_type, req.payload.data, req.payload.encoding)
        assert job.priority == (req.priority if req.HasField("priority") else 5)
        assert job.max_attempts == 10 and job.run_at == h.now and job.idempotency_key == (req.idempotency_key or None)


async def test_plain_path_creates_queues_on_demand_up_to_max_queues(make_harness: HarnessFactory) -> None:
    h = await make_harness(limits={"max_queues": 2}, queue_defaults={"default_priority": 4,
                                                                     "default_max_attempts": 6})
    ref = await make_harness(limits={"max_queues": 2})
    batch = [plain("a"), plain("b"), plain("c"), plain("a"), request("d", priority=1), plain("c"), plain("b")]
    results = await h.engine.enqueue_batch(batch)
    ref.engine.queues.begin_admission()
    expected = [ref.engine.validator.check(r, ref.now * 1000) for r in batch]
    assert [type(r) is pb.Rejection for r in results] == [False, False, True, False, True, True, False]
    for got, want in zip(results, expected, strict=True):
        if type(want) is pb.Rejection:
            assert got == want
    assert sorted(q.name for q in h.engine.queues.all()) == ["a", "b"]
    assert sorted(q.name for q in await h.store.load_queues()) == ["a", "b"]
    first = results[0]
    assert type(first) is tuple
    raw = job_id_bytes(first[0])
    assert raw is not None
    job = await h.job(raw)
    assert (job.priority, job.max_attempts) == (4, 6)
