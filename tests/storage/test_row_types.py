"""The hand-tuned row reads of the drivers' hot paths give what the plain by-name reads give,
for generated rows (``sepp.storage.row_types``): the Reserve's records, the batched ack's
results, the enqueue's test for keys, and PostgreSQL's reserve order and byte count of
leased rows."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sepp.domain.records import JobRow
from sepp.domain.transitions import ExpiredLease, HeldJob
from sepp.storage.postgres.reserve import _leased_bytes, _reserve_order
from sepp.storage.row_types import (
    AckedRow,
    ExpiredRow,
    LeasedRow,
    LeaseLookup,
    acked_result,
    acked_results,
    any_keyed,
    at,
    leased_record,
    leased_records,
)

_INT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_TEXT = st.text(max_size=20)
_ID = st.binary(min_size=16, max_size=16)
_MAYBE_TEXT = st.none() | _TEXT

leased_rows = st.builds(LeasedRow, id=_ID, job_type=_TEXT, priority=st.integers(-10, 10), run_at=_INT,
                        enqueued_at=_INT, attempt=st.integers(1, 100), max_attempts=st.integers(1, 100),
                        payload=st.binary(max_size=50), encoding=_TEXT, extras=st.none() | st.binary(max_size=20),
                        idempotency_key=_MAYBE_TEXT, history=_MAYBE_TEXT, seq=st.integers(1, 2**40))
acked_rows = st.builds(AckedRow, id=_ID, queue=_TEXT, attempt=st.integers(0, 100), seq=st.integers(1, 2**40),
                       started_at=st.none() | st.integers(0, 2**62), job_type=_TEXT)


@given(st.lists(leased_rows, max_size=8), _TEXT, _ID, _INT, _TEXT, _INT, _TEXT)
def test_leased_records_are_the_records_built_by_name(rows: list[LeasedRow], queue: str, lease_id: bytes,
                                                      expires: int, worker: str, now: int, node: str) -> None:
    raw = [tuple(r) for r in rows]  # as a driver hands them: plain tuples / records
    fast = leased_records(raw, queue, lease_id, expires, worker, now, node)
    assert fast == [leased_record(r, queue, lease_id, expires, worker, now, node) for r in rows]
    assert all(type(f).__name__ == "JobRecord" for f in fast)


@given(st.lists(acked_rows, max_size=8, unique_by=lambda r: r.id), _INT)
def test_acked_results_are_the_results_built_by_name(rows: list[AckedRow], now: int) -> None:
    fast = acked_results([tuple(r) for r in rows], now)
    assert fast == {r.id: acked_result(r, now) for r in rows}
    assert all(type(v).__name__ == "SettleResult" for v in fast.values())


@given(st.lists(leased_rows, max_size=8))
def test_the_reserve_order_and_bytes_of_leased_rows_are_those_read_by_name(rows: list[LeasedRow]) -> None:
    raw = [tuple(r) for r in rows]
    assert sorted(raw, key=_reserve_order) == [tuple(r) for r in sorted(rows, key=lambda r: (-r.priority, r.run_at,
                                                                                             r.seq))]
    assert _leased_bytes(raw) == sum(len(r.payload) + len((r.history or "").encode()) for r in rows)


@given(st.lists(st.none() | st.sampled_from(["", "k"]), max_size=6))
def test_any_keyed_is_whether_a_row_has_a_key(keys: list[str | None]) -> None:
    rows = [JobRow(b"i" * 16, "q", "t", 2, 0, 0, 0, 3, b"", "e", None, key) for key in keys]
    assert any_keyed(rows) == any(row.idempotency_key for row in rows)


def _values(row_type: Any, source: Any) -> Any:
    """``row_type`` built by name from the fields of the same names in ``source``."""
    return row_type(**{name: getattr(source, name) for name in row_type._fields})


@given(st.tuples(*([st.integers()] * len(LeaseLookup._fields))))
def test_a_lease_lookup_hands_the_rules_the_columns_of_the_same_names(values: tuple[int, ...]) -> None:
    row = LeaseLookup._make(values)
    assert row.held() == _values(HeldJob, row)


@given(st.tuples(*([st.integers()] * len(ExpiredRow._fields))))
def test_an_expired_row_hands_the_rules_the_columns_of_the_same_names(values: tuple[int, ...]) -> None:
    row = ExpiredRow._make(values)
    assert row.lease() == _values(ExpiredLease, row)


def test_a_position_is_the_index_of_its_name() -> None:
    assert [at(LeasedRow, name) for name in LeasedRow._fields] == list(range(len(LeasedRow._fields)))
