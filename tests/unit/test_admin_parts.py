"""The admin engine's parts on their own: the page-token codec keeps its wire
form, the throughput counter dates its counts by the injected clock, and the admin state
names keep their UPPERCASE wire spelling."""

from __future__ import annotations

import pytest

from sepp.domain.clock import FakeClock
from sepp.domain.records import JobRow
from sepp.domain.states import State
from sepp.server.admin import state_name
from sepp.server.admin.cursor import decode_cursor, encode_cursor, fingerprint
from sepp.server.admin.throughput import MINUTE_US, ThroughputCounter
from sepp.server.errors import InvalidRequest
from sepp.storage.admin import JobQuery


def test_a_page_token_keeps_its_wire_form_and_its_filters() -> None:
    query = JobQuery(queue="q", state=5)
    token = encode_cursor(query, [5, "x", 12])
    assert token == "eyJmIjoiMGIwZGEzNDVmM2UwIiwiayI6WzUsIngiLDEyXX0"  # what a client may hold
    assert fingerprint(JobQuery()) == "bab8e165016b"
    assert decode_cursor(query, token) == [5, "x", 12]
    assert decode_cursor(query, "") is None
    with pytest.raises(InvalidRequest, match="issued for other filters"):
        decode_cursor(JobQuery(queue="other"), token)
    with pytest.raises(InvalidRequest, match="malformed"):
        decode_cursor(query, "!!")


def test_the_throughput_counter_dates_finished_jobs_by_its_clock() -> None:
    clock = FakeClock()
    counter = ThroughputCounter(clock)
    minute = clock.now() // MINUTE_US
    rows = [JobRow(bytes(16), "a", "t", 2, 5, 0, clock.now(), 3, b"", "", None, None) for _ in range(3)]
    counter.on_stored(rows, {1: (bytes(16), 2)})
    clock.advance(60)
    counter.on_finished("a", int(State.COMPLETED), 2)
    counter.on_finished("a", int(State.DEAD_LETTERED), 1)
    assert counter.take() == {("a", minute): (2, 0, 0), ("a", minute + 1): (0, 2, 1)}
    assert counter.take() == {}


def test_admin_state_names_are_the_uppercase_wire_spelling() -> None:
    assert [state_name(int(s)) for s in State] == ["SCHEDULED", "READY", "RESERVED", "COMPLETED", "DEAD_LETTERED",
                                                   "CANCELLED", "DEFERRED"]
    assert state_name(99) == "UNKNOWN"
