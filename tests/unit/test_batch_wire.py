"""The batch answer's fast encodings (``rpc.producer.acks_wire`` on the server,
``client._fastwire.parse_batch_response`` on the client) are byte for byte and result for
result what the protobuf message gives, and anything else takes the message path."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from sepp import EnqueueAck, Rejection
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _core, _fastwire
from sepp.server.rpc.producer import acks_wire


def message(results: list[tuple[str, bool] | pb.Rejection]) -> ppb.EnqueueBatchResponse:
    """The message the servicer builds when ``acks_wire`` declines."""
    resp = ppb.EnqueueBatchResponse()
    for r in results:
        if isinstance(r, pb.Rejection):
            resp.results.add(rejection=r)
        else:
            resp.results.add(ack=pb.EnqueueAck(job_id=r[0], deduplicated=r[1]))
    return resp


def ids(n: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(n)]


def test_fresh_acks_are_the_message_serialized() -> None:
    for n in (1, 2, 256):
        results: list[tuple[str, bool] | pb.Rejection] = [(i, False) for i in ids(n)]
        assert acks_wire(results) == message(results).SerializeToString()


def test_anything_else_is_left_to_the_message() -> None:
    a, b = ids(2)
    rejection = pb.Rejection(code=pb.PAYLOAD_TOO_LARGE, message="too big", field="payload.data")
    assert acks_wire([(a, False), (b, True)]) is None
    assert acks_wire([(a, False), rejection]) is None
    assert acks_wire([("short-id", False)]) is None
    assert acks_wire([("é" * 36, False)]) is None
    assert acks_wire([]) is None


def test_the_client_reads_every_answer_as_the_message_says() -> None:
    a, b, c = ids(3)
    rejection = pb.Rejection(code=pb.PAYLOAD_TOO_LARGE, message="too big", field="payload.data")
    answers: list[list[tuple[str, bool] | pb.Rejection]] = [
        [(a, False)], [(a, False), (b, False), (c, False)], [(a, False), (b, True)], [(a, False), rejection],
        [(a.upper(), False)], [("x", False)], []]
    for results in answers:
        data = message(results).SerializeToString()
        fast = _fastwire.parse_batch_response(data)
        verdicts: list[Rejection | None] = [None] * len(results)
        want = _core.merge_batch(verdicts, ppb.EnqueueBatchResponse.FromString(data))
        assert _core.merge_batch(verdicts, fast) == want
        fresh = all(not isinstance(r, pb.Rejection) and not r[1] and r[0].islower() and len(r[0]) == 36
                    for r in results) and bool(results)
        assert isinstance(fast, _fastwire.FreshAcks) == fresh
    local = Rejection.from_proto(rejection)
    merged = _core.merge_batch([None, local, None], _fastwire.parse_batch_response(
        message([(a, False), (b, False)]).SerializeToString()))
    assert merged == [EnqueueAck(a), local, EnqueueAck(b)]


def test_only_exact_fresh_ack_encodings_are_read_as_fresh_acks() -> None:
    """``parse_batch_response`` reads bytes as ``FreshAcks`` only when they are heads and
    canonical 36-byte ids in exactly protobuf's layout; any other bytes of the right length
    (a head moved by a byte, an id byte that is not lower-case hex or a dash, a shorter and a
    longer id side by side) are parsed as the message (or refused as it refuses them)."""
    a, b = ids(2)
    good = message([(a, False), (b, False)]).SerializeToString()
    assert _fastwire.parse_batch_response(good) == [a, b]
    head = b"\n(\n&\n$"
    near = [
        head + a.encode() + head + b.upper().encode(),  # not canonical: the message
        head + a[:35].encode() + head + b.encode() + b"f",  # 35 + 37 bytes: not protobuf's layout
        b"f" + head + a[:35].encode() + head + b.encode(),  # a byte before the first head
        head + a.encode()[:-1] + b"\n" + head + b.encode(),  # a head byte inside an id
    ]
    for data in near:
        assert len(data) == len(good)
        assert not isinstance(_parse(data), _fastwire.FreshAcks)
    upper = _fastwire.parse_batch_response(near[0])
    assert isinstance(upper, ppb.EnqueueBatchResponse)
    assert _core.merge_batch([None, None], upper) == [EnqueueAck(a), EnqueueAck(b.upper())]


def _parse(data: bytes) -> object:
    """``parse_batch_response(data)``, or the error it raised (bytes protobuf refuses)."""
    try:
        return _fastwire.parse_batch_response(data)
    except Exception as exc:  # DecodeError: whatever protobuf raises
        return exc


def test_a_head_split_by_an_id_byte_is_no_fresh_ack() -> None:
    """Bytes of the right length whose only non-id bytes spell the heads, but one head split
    by an id byte (so a split at the heads finds one piece too few): not fresh acks — the
    message path refuses them (DecodeError) — and never an ack whose id holds head bytes."""
    a, b, c = ids(3)
    head = b"\n(\n&\n$"
    for data in (head + a.encode() + head + b.encode() + head[:2] + b"c" + head[2:] + c.encode()[1:],
                 head + a.encode() + head[:2] + b"c" + head[2:] + c.encode()[1:]):
        assert len(data) % 42 == 0 and data.translate(None, b"0123456789abcdef-") == head * (len(data) // 42)
        assert not isinstance(_parse(data), _fastwire.FreshAcks), _parse(data)


_ID_CHARS = "0123456789abcdef-"
_HEAD = b"\n(\n&\n$"
answer_ids = st.one_of(st.uuids().map(str), st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()),
                       st.text(_ID_CHARS, min_size=35, max_size=37), st.text(min_size=36, max_size=36),
                       st.text(st.characters(exclude_categories=["Cs"]), max_size=40))
rejections = st.builds(pb.Rejection, code=st.sampled_from([pb.PAYLOAD_TOO_LARGE, pb.UNKNOWN_QUEUE]),
                       message=st.text(st.characters(exclude_categories=["Cs"]), max_size=10))
answers = st.lists(st.one_of(st.tuples(answer_ids, st.booleans()), st.tuples(answer_ids, st.just(False)),
                             rejections), max_size=8)


def _fresh(results: list[tuple[str, bool] | pb.Rejection], chars: str | None) -> bool:
    """Whether every result is a fresh ack of a 36-character id (of ``chars`` only, or ASCII)."""
    return bool(results) and all(
        not isinstance(r, pb.Rejection) and not r[1] and len(r[0]) == 36
        and (r[0].isascii() if chars is None else all(c in chars for c in r[0])) for r in results)


@settings(max_examples=400, deadline=None)
@given(answers)
def test_the_servers_hand_written_acks_are_the_message_serialized_or_declined(
        results: list[tuple[str, bool] | pb.Rejection]) -> None:
    wire = acks_wire(results)
    if _fresh(results, None):
        assert wire == message(results).SerializeToString()
    else:
        assert wire is None


@settings(max_examples=400, deadline=None)
@given(answers)
def test_the_client_reads_generated_answers_as_protobuf_does(results: list[tuple[str, bool] | pb.Rejection]) -> None:
    data = message(results).SerializeToString()
    fast = _fastwire.parse_batch_response(data)
    assert isinstance(fast, _fastwire.FreshAcks) == _fresh(results, _ID_CHARS)
    verdicts: list[Rejection | None] = [None] * len(results)
    assert _core.merge_batch(verdicts, fast) == _core.merge_batch(verdicts, ppb.EnqueueBatchResponse.FromString(data))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.just(_HEAD), st.just(_HEAD[:3]), st.text(_ID_CHARS, max_size=40).map(str.encode)),
                min_size=1, max_size=12))
def test_bytes_laid_out_almost_like_fresh_acks_are_read_as_protobuf_reads_them(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    want, got = _parse_plain(data), _parse(data)
    if isinstance(want, Exception):
        assert isinstance(got, Exception) and type(got) is type(want)
        return
    assert not isinstance(got, Exception), got
    verdicts: list[Rejection | None] = [None] * len(want.results)
    assert isinstance(got, (_fastwire.FreshAcks, ppb.EnqueueBatchResponse))
    assert _core.merge_batch(verdicts, got) == _core.merge_batch(verdicts, want)


def _parse_plain(data: bytes) -> ppb.EnqueueBatchResponse | Exception:
    """``EnqueueBatchResponse.FromString(data)``, or the error it raised."""
    try:
        return ppb.EnqueueBatchResponse.FromString(data)
    except Exception as exc:  # DecodeError
        return exc
