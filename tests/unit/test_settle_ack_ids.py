"""``all_ack_ids`` (the Settle hot path): the ids of a Settle of acks with canonical ids,
the bytes ``job_id_bytes`` gives for each, in item order — and None for anything else
(a nack, an empty item, an id in another form), which the item-by-item path then judges."""

from __future__ import annotations

import uuid

import pytest

from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.ids import job_id_bytes
from sepp.server.rpc.settle_wire import all_ack_ids

IDS = [str(uuid.UUID(int=n * 0x1234567890ABCDEF + 7)) for n in range(1, 9)]


def _acks(*pairs: tuple[str, str]) -> list[wpb.SettleItem]:
    return [wpb.SettleItem(ack=wpb.AckRequest(job_id=j, lease_id=lease)) for j, lease in pairs]


def test_the_ids_of_canonical_acks_are_the_bytes_job_id_bytes_gives_in_item_order() -> None:
    pairs = [(IDS[0], IDS[1]), (IDS[2].upper(), IDS[3]), (IDS[4], IDS[5].upper())]
    raw = all_ack_ids(wpb.SettleRequest(items=_acks(*pairs), worker_id="w-1"))
    assert raw == b"".join(job_id_bytes(text) or b"" for pair in pairs for text in pair)
    assert raw is not None and len(raw) == 32 * len(pairs)


@pytest.mark.parametrize("items", [
    [],
    [wpb.SettleItem()],
    [*_acks((IDS[0], IDS[1])), wpb.SettleItem(nack=wpb.NackRequest(job_id=IDS[2], lease_id=IDS[3]))],
    [wpb.SettleItem(nack=wpb.NackRequest(job_id=IDS[2], lease_id=IDS[3])), *_acks((IDS[0], IDS[1]))],
    [*_acks((IDS[0], IDS[1])), wpb.SettleItem()],
    _acks((IDS[0].replace("-", ""), IDS[1])),
    _acks(("{" + IDS[0] + "}", IDS[1])),
    _acks((IDS[0], "")),
    _acks((IDS[0][:-1], IDS[0][-1] + IDS[1])),  # 35 + 37 characters that run together as two ids
    _acks((IDS[0][:8] + " " + IDS[0][9:], IDS[1])),
    _acks((IDS[0][:35] + "g", IDS[1])),
    [wpb.SettleItem(ack=wpb.AckRequest(job_id=IDS[0], lease_id=IDS[1], worker_id="w"))],
    [*_acks((IDS[0], IDS[1])), wpb.SettleItem(ack=wpb.AckRequest(job_id=IDS[0][:-2], lease_id=IDS[1] + "ab"))],
], ids=["none", "empty-item", "ack-then-nack", "nack-then-ack", "ack-then-empty", "no-hyphens", "braces",
        "empty-lease", "run-together", "space", "not-hex", "ack-worker-id", "lengths-shifted"])
def test_anything_but_canonical_acks_takes_the_item_path(items: list[wpb.SettleItem]) -> None:
    assert all_ack_ids(wpb.SettleRequest(items=items)) is None
    assert all_ack_ids(wpb.SettleRequest(items=items, worker_id="w" * 80)) is None


def test_an_ack_with_an_unknown_field_takes_the_item_path() -> None:
    ack = wpb.AckRequest(job_id=IDS[0], lease_id=IDS[1]).SerializeToString() + b"\x48\x01"  # field 9 = 1
    item = b"\x0a" + bytes((len(ack),)) + ack
    request = wpb.SettleRequest.FromString(b"\x0a" + bytes((len(item),)) + item)
    assert request.items[0].ack.job_id == IDS[0]
    assert all_ack_ids(request) is None
