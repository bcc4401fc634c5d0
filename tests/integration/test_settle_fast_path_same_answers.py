"""Attacks on the Settle fast path (``all_ack_ids``: the acks' ids read from the request's
wire form) against a real server: every request is sent as raw bytes twice, on two fresh
sets of jobs — as it is (the fast path when it is all canonical acks) and with an empty
item appended, which forces the item-by-item path — and the two answers (per item: ok,
reason, state) and the jobs' states afterwards must be the same. Malformed framing is
INVALID_ARGUMENT, never UNKNOWN."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import grpc
import pytest
from support.servers import module_server
from support.worker import Wire, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.hard_limits import MAX_SETTLE_BATCH
from sepp.testing import ServerProcess
from sepp.wire import varint as _varint

Pairs = list[tuple[str, str]]
Build = Callable[[Pairs], Pairs]


@pytest.fixture(scope="module")
def settle_server(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend)


def _ack(job_id: str, lease_id: str, extra: bytes = b"") -> bytes:
    """A ``SettleRequest`` of one ack item, framed by hand as the worker's ``Settler`` frames
    it (``sepp.wire.varint``), with ``extra`` appended to the ``AckRequest``'s own bytes."""
    ack = wpb.AckRequest(job_id=job_id, lease_id=lease_id).SerializeToString() + extra
    item = b"\x0a" + _varint(len(ack)) + ack
    return b"\x0a" + _varint(len(item)) + item


def _settle_raw(w: Wire, raw: bytes) -> list[wpb.SettleResult]:
    call = w.channel.unary_unary("/sepp.api.v1.WorkerService/Settle")
    return list(wpb.SettleResponse.FromString(call(raw, timeout=30)).results)


def _answer(results: list[wpb.SettleResult]) -> list[tuple[bool, str, int]]:
    return [(r.ok, r.error_reason, r.state) for r in results]


def _run(w: Wire, queue: str, build: Build, trailer: bytes, slow: bool, jobs: int = 3,
         ack_extra: bytes = b"") -> tuple[list[tuple[bool, str, int]], list[int]]:
    ids = w.enqueue_many([pb.EnqueueRequest(queue=queue, job_type="t") for _ in range(jobs)])
    got = w.reserve([queue], max_jobs=jobs)
    assert sorted(r.job.id for r in got) == sorted(ids)
    got.sort(key=lambda r: ids.index(r.job.id))
    pairs = build([(r.job.id, r.lease_id) for r in got])
    raw = b"".join(_ack(j, lease, ack_extra) for j, lease in pairs)
    if slow:
        raw += b"\x0a\x00"  # an empty item: INVALID_ARGUMENT alone, and the item path for all
    results = _settle_raw(w, raw + trailer)
    if slow:
        assert results[-1].error_reason == "INVALID_ARGUMENT"
        results = results[:-1]
    states = [int(w.get_job(i).state) for i in ids]
    return _answer(results), states


_OTHER = str(uuid.UUID(int=0xDEADBEEF))
CASES: dict[str, tuple[Build, bytes]] = {
    "plain": (lambda p: p, b""),
    "upper-case": (lambda p: [(j.upper(), lease.upper()) for j, lease in p], b""),
    "mixed-case": (lambda p: [(j[:18].upper() + j[18:], lease) for j, lease in p], b""),
    "duplicated": (lambda p: [p[0], p[0], p[1], p[0]], b""),
    "swapped-leases": (lambda p: [(p[0][0], p[1][1]), (p[1][0], p[0][1]), p[2]], b""),
    "lease-as-job-id": (lambda p: [(p[0][1], p[0][1]), p[0], (p[1][1], p[1][0])], b""),
    "job-as-lease-id": (lambda p: [(p[0][0], p[0][0]), p[1]], b""),
    "unknown-job": (lambda p: [(_OTHER, p[0][1]), p[0], (p[1][0], _OTHER)], b""),
    "not-hex": (lambda p: [(p[0][0][:-1] + "z", p[0][1]), p[1]], b""),
    "worker-id": (lambda p: p, b"\x12\x05w-abc"),
    "unknown-top-level-field": (lambda p: p, b"\x48\x01\x5a\x03abc"),
    "nil-uuid": (lambda p: [("00000000-0000-0000-0000-000000000000", p[0][1]), p[1]], b""),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_fast_path_answers_as_the_item_path(settle_server: ServerProcess, case: str) -> None:
    build, trailer = CASES[case]
    with wire_for(settle_server, f"fa-{uuid.uuid4().hex[:10]}") as w:
        fast = _run(w, f"fa-{uuid.uuid4().hex[:10]}", build, trailer, slow=False)
        slow = _run(w, f"fa-{uuid.uuid4().hex[:10]}", build, trailer, slow=True)
    assert fast == slow


def test_an_ack_with_an_unknown_field_answers_as_a_plain_one(settle_server: ServerProcess) -> None:
    with wire_for(settle_server) as w:
        extra = _run(w, f"fa-{uuid.uuid4().hex[:10]}", lambda p: p, b"", slow=False, ack_extra=b"\x48\x01")
        plain = _run(w, f"fa-{uuid.uuid4().hex[:10]}", lambda p: p, b"", slow=False)
    assert extra == plain and all(ok for ok, _, _ in plain[0])


@pytest.mark.parametrize("raw", [
    _ack(_OTHER, _OTHER)[:-5],  # the item's length says more than there is
    b"\x0a\x4e" + _ack(_OTHER, _OTHER)[2:] + b"\x0a\x4e\x0a\x4c",
    b"\x0a\xff\xff\xff\xff\x0f" + _ack(_OTHER, _OTHER),
    b"\x0a\x4e\x0a\x4c\x0a\x24" + b"\xff" * 36 + b"\x12\x24" + _OTHER.encode(),  # not UTF-8
], ids=["truncated", "trailing-partial-item", "huge-length", "bad-utf8"])
def test_lying_framing_is_invalid_argument(settle_server: ServerProcess, raw: bytes) -> None:
    with wire_for(settle_server) as w, pytest.raises(grpc.RpcError) as caught:
        _settle_raw(w, raw)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_the_largest_batch_of_unknown_acks_is_answered_item_by_item(settle_server: ServerProcess) -> None:
    with wire_for(settle_server) as w:
        ids = [str(uuid.UUID(int=n + 1)) for n in range(MAX_SETTLE_BATCH)]
        results = _settle_raw(w, b"".join(_ack(i, i) for i in ids))
        assert len(results) == MAX_SETTLE_BATCH
        assert {r.error_reason for r in results} == {"JOB_NOT_FOUND"}
        with pytest.raises(grpc.RpcError) as caught:
            _settle_raw(w, b"".join(_ack(i, i) for i in [*ids, _OTHER]))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
