"""The wire side of ``WorkerService.Settle`` that needs no engine: the acks' ids read
straight from a request's bytes (``all_ack_ids``, the hot path) and the answers built from
``SettleResult``s (``settle_response``, ``add_result``, ``ALL_COMPLETED``)."""

from __future__ import annotations

import binascii
import re
from typing import Any

from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.params import SettleResult
from sepp.domain.states import State
from sepp.server.rpc.convert import set_ts

_COMPLETED = int(State.COMPLETED)

_HEX = rb"[0-9a-fA-F]"
_UUID = _HEX + rb"{8}-" + _HEX + rb"{4}-" + _HEX + rb"{4}-" + _HEX + rb"{4}-" + _HEX + rb"{12}"
#: Serialized ``SettleRequest.items`` of acks whose ids are canonical UUID text (8-4-4-4-12
#: hex digits, either case) and nothing else: each item 80 bytes, ``0x0a 0x4e`` (item, 78
#: bytes) ``0x0a 0x4c`` (ack, 76 bytes) ``0x0a 0x24`` <job id> ``0x12 0x24`` <lease id>.
#: The lengths are part of the pattern, so a match is read item by item from the start:
#: an item of any other kind, length or content (a nack, an empty item, an ack with a
#: worker_id, an id in another form, unknown fields) ends it.
_ACK_ITEMS = re.compile(rb"(?:\x0a\x4e\x0a\x4c\x0a\x24" + _UUID + rb"\x12\x24" + _UUID + rb")*")
#: The bytes of ``_ACK_ITEMS`` that are not hex digits: the framing and the hyphens.
_FRAMING = b"\x0a\x12\x24\x4c\x4e-"


def all_ack_ids(request: wpb.SettleRequest) -> bytes | None:
    """The 16-byte ids of a Settle made only of acks whose job and lease ids are canonical
    UUID text, one after the other — job id, lease id, job id, … in item order (item i's
    ids at ``32 * i`` and ``32 * i + 16``), the bytes ``job_id_bytes`` gives for each.

    Read from the request's wire form (``SerializeToString``: the items first, each in
    protobuf's field order) with one regex match (``_ACK_ITEMS``) and one ``unhexlify`` for
    the whole call, instead of two attribute reads and two ``job_id_bytes`` per item. None
    when there is no item, or any item is not such an ack: the caller then takes the
    item-by-item path, which refuses or accepts each item exactly as before."""
    n = len(request.items)
    if not n:
        return None
    items = request.SerializeToString()[:80 * n]
    if _ACK_ITEMS.fullmatch(items) is None:
        return None
    return binascii.unhexlify(items.translate(None, _FRAMING))


def add_result(add: Any, r: SettleResult) -> None:
    """One ``SettleResult`` message for ``r`` via ``add`` (``SettleResponse.results.add``)."""
    if r.error is not None:
        add(ok=False, error_reason=r.error.value, error_message=r.error.value)
    elif r.state in BACK:  # where a nacked job went
        res = add(ok=True, state=r.state)
        set_ts(res.run_at, r.run_at)
    else:
        add(ok=True, state=r.state)


def settle_response(results: list[SettleResult]) -> wpb.SettleResponse:
    """The answer of a Settle whose items all parsed: one result per item, in order."""
    resp = wpb.SettleResponse()
    add = resp.results.add
    for r in results:
        add_result(add, r)
    return resp

#: One serialized ``SettleResponse.results`` entry ``{ok: true, state: COMPLETED}``: a Settle
#: whose acks all completed their jobs answers with this repeated once per item (protobuf
#: encodes a repeated field as its entries one after the other).
ALL_COMPLETED = wpb.SettleResponse(results=[wpb.SettleResult(ok=True, state=_COMPLETED)]).SerializeToString()  # type: ignore[arg-type]

#: States a successful nack can leave a job in that come with a run_at (SCHEDULED, READY).
BACK = frozenset((int(State.SCHEDULED), int(State.READY)))


__all__ = ["ALL_COMPLETED", "BACK", "add_result", "all_ack_ids", "settle_response"]
