"""The hand-tuned tuple builders of ``sepp.server.fast_rows`` give exactly what the plain
construction gives (``JobRow(...)``, ``SettleParams(...)``) over generated inputs: same
type, same fields, same order — so a field added to either class fails here."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.records import JobRow
from sepp.domain.states import State
from sepp.server.fast_rows import ack_params, ack_params_of, job_row, plain_rows, result_ack_params

ids = st.binary(min_size=16, max_size=16)
texts = st.text(max_size=40)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
states = st.sampled_from([int(s) for s in State])


@given(ids, texts, texts, states, ints, ints, ints, ints, st.binary(max_size=64), texts,
       st.none() | st.binary(max_size=32), st.none() | texts)
def test_job_row_is_the_plain_job_row(job_id: bytes, queue: str, job_type: str, state: int, priority: int,
                                      run_at: int, enqueued_at: int, max_attempts: int, payload: bytes,
                                      encoding: str, extras: bytes | None, key: str | None) -> None:
    fast = job_row((job_id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, payload, encoding,
                    extras, key))
    plain = JobRow(job_id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, payload, encoding,
                   extras, key)
    assert type(fast) is JobRow
    assert fast == plain
    assert fast._asdict() == plain._asdict()


@given(st.lists(st.tuples(ids, st.binary(max_size=64)), max_size=20), texts, texts, ints, ints, ints, texts)
def test_plain_rows_are_the_plain_ready_rows(jobs: list[tuple[bytes, bytes]], queue: str, job_type: str,
                                             priority: int, max_attempts: int, now: int, encoding: str) -> None:
    fast = list(plain_rows([j for j, _ in jobs], queue, job_type, priority, max_attempts, now,
                           [p for _, p in jobs], encoding))
    plain = [JobRow(job_id, queue, job_type, int(State.READY), priority, now, now, max_attempts, payload, encoding,
                    None, None) for job_id, payload in jobs]
    assert all(type(row) is JobRow for row in fast)
    assert fast == plain
    assert [row._asdict() for row in fast] == [row._asdict() for row in plain]


@given(ids, ids, ints)
def test_ack_params_are_the_plain_ack(job_id: bytes, lease_id: bytes, now: int) -> None:
    fast = ack_params(job_id, lease_id, now)
    plain = SettleParams(job_id, lease_id, SettleKind.ACK, now, outcome="completed")
    assert type(fast) is SettleParams
    assert fast == plain
    assert fast._asdict() == plain._asdict()


@given(ids, ids, ints, st.binary(max_size=64), texts)
def test_result_ack_params_are_the_plain_ack_with_its_result(job_id: bytes, lease_id: bytes, now: int, result: bytes,
                                                             encoding: str) -> None:
    fast = result_ack_params(job_id, lease_id, now, result, encoding)
    plain = SettleParams(job_id, lease_id, SettleKind.ACK, now, outcome="completed", result=result,
                         result_encoding=encoding)
    assert type(fast) is SettleParams
    assert fast == plain
    assert fast._asdict() == plain._asdict()


@given(st.lists(st.tuples(ids, ids), max_size=20), ints)
def test_ack_params_of_wire_ids_are_the_plain_acks(pairs: list[tuple[bytes, bytes]], now: int) -> None:
    wire = b"".join(job_id + lease_id for job_id, lease_id in pairs)
    fast = ack_params_of(wire, now)
    plain = [SettleParams(job_id, lease_id, SettleKind.ACK, now, outcome="completed") for job_id, lease_id in pairs]
    assert all(type(p) is SettleParams for p in fast)
    assert fast == plain
    assert [p._asdict() for p in fast] == [p._asdict() for p in plain]
