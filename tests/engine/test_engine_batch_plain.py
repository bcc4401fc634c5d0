"""The batched enqueue's plain-request path (``JobEngine.enqueue_batch``: a memo of the
verdict per queue, job type and encoding) answers exactly what ``Validator.check`` answers
request by request, and stores the rows ``_build`` builds; plain jobs sent by column
(``EnqueueBatchRequest.plain``) answer and store what the requests they stand for do."""

from __future__ import annotations

import pytest

from engine.engine_kit import Harness, HarnessFactory, request
from sepp.api.v1 import common_pb2 as pb
from sepp.domain.ids import job_id_bytes
from sepp.server.admission import expand_plain
from sepp.server.errors import AtomicRejected, InvalidRequest


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
    ref.parts.queues.begin_admission()
    expected = [ref.parts.validator.check(r, ref.now * 1000) for r in batch]
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
    ref.parts.queues.begin_admission()
    expected = [ref.parts.validator.check(r, ref.now * 1000) for r in batch]
    assert [type(r) is pb.Rejection for r in results] == [False, False, True, False, True, True, False]
    for got, want in zip(results, expected, strict=True):
        if type(want) is pb.Rejection:
            assert got == want
    assert sorted(q.name for q in h.parts.queues.all()) == ["a", "b"]
    assert sorted(q.name for q in await h.store.load_queues()) == ["a", "b"]
    first = results[0]
    assert type(first) is tuple
    raw = job_id_bytes(first[0])
    assert raw is not None
    job = await h.job(raw)
    assert (job.priority, job.max_attempts) == (4, 6)


# ------------------------------------------------------------- jobs by column (PlainJobs)


def run(queue: str, datas: list[bytes], encoding: str = "application/json", job_type: str = "t") -> pb.PlainJobs:
    """A run of plain jobs by column (``EnqueueBatchRequest.plain``)."""
    return pb.PlainJobs(queue=queue, job_type=job_type, encoding=encoding, data=datas)


async def _same_as_expanded(h: Harness, ref: Harness, jobs: list[pb.EnqueueRequest],
                            runs: list[pb.PlainJobs]) -> list[pb.Rejection | tuple[str, bool]]:
    """Enqueue ``jobs`` + ``runs`` on ``h`` and the same jobs as requests on ``ref`` (a twin);
    assert both answer the same verdicts and store the same rows; return ``h``'s results."""
    got = await h.engine.enqueue_batch(jobs, plain=runs)
    want = await ref.engine.enqueue_batch([*jobs, *expand_plain(runs)])
    assert len(got) == len(want) == len(jobs) + sum(len(r.data) for r in runs)
    for g, w in zip(got, want, strict=True):
        if type(w) is pb.Rejection:
            assert g == w
            continue
        assert type(g) is tuple and g[1] is w[1] is False
        a, b = await h.job(job_id_bytes(g[0]) or b""), await ref.job(job_id_bytes(w[0]) or b"")
        fields = ("queue", "job_type", "payload", "encoding", "priority", "max_attempts", "run_at", "state",
                  "attempt", "idempotency_key", "extras")
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    return got


async def test_runs_by_column_answer_and_store_what_their_requests_do(make_harness: HarnessFactory) -> None:
    queues = {"q": {"limits": {"max_payload_bytes": 10, "allowed_encodings": ["application/json", ""]},
                    "default_priority": 3}, "r": {"limits": {"max_payload_bytes": 100}}}
    h = await make_harness(queues, strict=True)
    ref = await make_harness(queues, strict=True)
    # Every job passes: each run checked once, built by column; after the requests, in order.
    runs = [run("q", [b"{}", b"x" * 10, b""]), run("r", [b"y", b"z" * 100], ""), run("q", [b"1"], "")]
    got = await _same_as_expanded(h, ref, [plain("q"), request("r", priority=9)], runs)
    assert all(type(g) is tuple for g in got) and len(got) == 8
    # One job one past the cap: every job checked alone, that one rejected (PayloadTooLarge).
    got = await _same_as_expanded(h, ref, [], [run("q", [b"a", b"x" * 11, b"b"]), run("r", [b"c"], "")])
    assert [type(g) is pb.Rejection for g in got] == [False, True, False, False]
    # A run of an unknown queue (strict), of a refused encoding, of a bad job type, between good ones.
    got = await _same_as_expanded(h, ref, [plain("q", b"x" * 11)], [
        run("q", [b"a"]), run("nope", [b"b", b"c"]), run("q", [b"d"], "text/plain"), run("q", [b"e"], job_type=""),
        run("r", [], ""), run("r", [b"f"], "")])
    assert [type(g) is pb.Rejection for g in got] == [True, False, True, True, True, True, False]


async def test_runs_by_column_create_queues_on_demand(make_harness: HarnessFactory) -> None:
    h = await make_harness(limits={"max_queues": 2}, queue_defaults={"default_priority": 4,
                                                                     "default_max_attempts": 6})
    ref = await make_harness(limits={"max_queues": 2}, queue_defaults={"default_priority": 4,
                                                                       "default_max_attempts": 6})
    got = await _same_as_expanded(h, ref, [], [run("a", [b"1", b"2"]), run("b", [b"3"])])
    assert all(type(g) is tuple for g in got)
    got = await _same_as_expanded(h, ref, [], [run("a", [b"4"]), run("c", [b"5"])])  # a third queue: refused
    assert [type(g) is pb.Rejection for g in got] == [False, True]
    assert sorted(q.name for q in await h.store.load_queues()) == ["a", "b"]
    job = await h.job(job_id_bytes(got[0][0]) or b"")  # type: ignore[index]
    assert (job.priority, job.max_attempts) == (4, 6)


async def test_the_batch_cap_counts_the_runs(make_harness: HarnessFactory) -> None:
    h = await make_harness(limits={"max_enqueue_batch": 4})
    assert len(await h.engine.enqueue_batch([plain("q")], plain=[run("q", [b"1", b"2"]), run("q", [b"3"])])) == 4
    with pytest.raises(InvalidRequest) as one_past:
        await h.engine.enqueue_batch([plain("q")], plain=[run("q", [b"1", b"2"]), run("q", [b"3", b"4"])])
    assert (one_past.value.field, one_past.value.limit, one_past.value.actual) == ("jobs", 4, 5)
    with pytest.raises(InvalidRequest) as none:
        await h.engine.enqueue_batch([], plain=[run("q", []), run("r", [])])
    assert (none.value.field, none.value.actual) == ("jobs", 0)
    with pytest.raises(InvalidRequest):
        await h.engine.enqueue_atomic([], [run("q", [b"1"] * 5)])
    # Runs are capped too (an empty run holds no job but costs a check): 4 runs pass, 5 do not.
    assert len(await h.engine.enqueue_batch([], plain=[run("q", [b"1"]), run("a", []), run("b", []),
                                                       run("c", [])])) == 1
    for call in (h.engine.enqueue_batch, h.engine.enqueue_atomic):
        with pytest.raises(InvalidRequest) as runs:
            await call([], plain=[run(f"q{i}", [] if i else [b"1"]) for i in range(5)])
        assert (runs.value.field, runs.value.limit, runs.value.actual) == ("plain", 4, 5)


async def test_an_atomic_batch_takes_runs_by_column(make_harness: HarnessFactory) -> None:
    h = await make_harness({"q": {"limits": {"max_payload_bytes": 2}}}, strict=True)
    acks = await h.engine.enqueue_atomic([plain("q", b"1")], [run("q", [b"22", b""])])
    assert len(acks) == 3
    job = await h.job(job_id_bytes(acks[1][0]) or b"")
    assert (job.queue, job.payload, job.encoding) == ("q", b"22", "application/json")
    with pytest.raises(AtomicRejected) as rejected:
        await h.engine.enqueue_atomic([plain("q", b"1")], [run("q", [b"22", b"333"])])
    assert [f.index for f in rejected.value.rejections] == [2]
