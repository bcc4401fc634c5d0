"""Live job events and progress without a server: the kind numbers are the wire enum's,
the relay's encoding round-trips, the progress gate coalesces (one send per second, the
latest value winning; fake clock), and ``Job.set_progress`` holds the 4 KiB limit."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.client.watch import KINDS, events_of
from sepp.domain.clock import FakeClock
from sepp.server import job_events as ev
from sepp.server.event_relay import decode_event, encode_event
from sepp.server.job_events import JobEvent
from sepp.server.rpc.watch import encode_events, events_message
from sepp.worker import Job
from sepp.worker._progress import ProgressGate


def test_the_kinds_are_the_wire_enums_numbers() -> None:
    wire = {name.removeprefix("JOB_EVENT_").lower(): number for name, number in ppb.JobEventKind.items()
            if number}
    assert wire == {name: number for number, name in ev.KIND_NAMES.items()}
    assert {number: name for name, number in wire.items()} == KINDS


def test_an_event_crosses_nodes_and_the_wire_unchanged() -> None:
    e = JobEvent(7, ev.RETRY_SCHEDULED, bytes(range(16)), "q", "t", 1, 1_767_225_600_123_456, 2, "w",
                 1_767_225_660_000_000, "boom é", "", '{"done":1}', 0, "n1")
    back = decode_event(json.loads(encode_event(e)))
    assert back == e._replace(position=0)
    assert decode_event(["nope"]) is None and decode_event([1] * 14) is None
    [seen] = events_of(ppb.WatchJobsResponse.FromString(events_message([e]).SerializeToString()))
    assert (seen.position, seen.kind, seen.job_id, seen.state, seen.attempt, seen.error, seen.progress, seen.node) == (
        7, "retry_scheduled", "00010203-0405-0607-0809-0a0b0c0d0e0f", "SCHEDULED", 2, "boom é", {"done": 1}, "n1")
    assert seen.at.timestamp() == pytest.approx(1_767_225_600.123456) and seen.run_at is not None
    assert seen.to_json()["at"].endswith("Z")


def test_the_gate_sends_at_most_once_a_second_and_the_latest_value() -> None:
    clock = FakeClock()
    gate = ProgressGate(clock, every=1.0)
    assert gate.due_in() == 0
    assert gate.take("0.1") == "0.1"  # the first value goes at once
    assert gate.due_in() == 1.0
    clock.advance(0.4)
    assert gate.due_in() == pytest.approx(0.6)  # 0.2 … 0.9 set meanwhile: held back
    clock.advance(0.6)
    assert gate.due_in() == 0
    assert gate.take("0.9") == "0.9"  # the latest of them, one write
    assert gate.take("0.9") is None  # nothing new: no write
    clock.advance(5)
    assert gate.take("0.9") is None and gate.take(None) is None
    gate.forget("0.9")  # its send failed: sent again next time
    assert gate.take("0.9") == "0.9"


def _job() -> tuple[Job, list[str | None]]:
    told: list[str | None] = []
    job = Job(wpb.Reservation(lease_id="l", attempt=1), 0.0, lambda j: told.append(j.progress))
    return job, told


def test_set_progress_keeps_4096_bytes_and_refuses_4097() -> None:
    job, told = _job()
    job.set_progress("x" * 4094)  # 4,096 bytes as JSON, quotes included
    assert len(job.progress or "") == 4096 and told == [job.progress]
    with pytest.raises(ValueError, match="4097 bytes as JSON; at most 4096"):
        job.set_progress("é" * 2047 + "x")  # 4,097 bytes of UTF-8
    assert len(told) == 1
    job.set_progress({"done": 3, "total": 10})
    assert job.progress == '{"done":3,"total":10}'
    job.set_progress(0.5)
    assert job.progress == "0.5"


def test_set_progress_refuses_what_json_cannot_hold() -> None:
    job, told = _job()
    with pytest.raises(TypeError, match="JSON-encodable"):
        job.set_progress(object())
    with pytest.raises(ValueError, match="JSON-encodable"):
        job.set_progress(float("nan"))
    with pytest.raises(ValueError, match="lone surrogate"):
        job.set_progress("\ud800")
    assert told == [] and job.progress is None


def test_a_message_carries_many_events_by_column_and_a_bad_one_is_refused() -> None:
    from sepp.errors import ServerError

    events = [JobEvent(n, ev.ENQUEUED, bytes([n]) * 16, f"q{n}", "t", 2, 1_767_225_600_000_000 + n, 0, "", 0, "", "",
                       "", 0, "n1") for n in range(1, 4)]
    seen = events_of(events_message(events))
    assert [(s.position, s.queue, s.run_at, s.progress) for s in seen] == [(1, "q1", None, None), (2, "q2", None, None),
                                                                         (3, "q3", None, None)]
    assert seen[1].job_id == "02020202-0202-0202-0202-020202020202"
    assert events_of(events_message([])) == []
    broken = events_message(events)
    broken.queues.pop()
    with pytest.raises(ServerError, match="columns disagree"):
        events_of(broken)



def test_a_batch_of_events_past_a_watchers_buffer_cuts_it_off() -> None:
    from sepp.domain.records import JobRow
    from sepp.server.job_events import JobEvents

    hub = JobEvents("n1", FakeClock(), buffer=3)
    fits, cut, filtered = hub.watch(), hub.watch(), hub.watch(queues=["q"])
    rows = [JobRow(bytes([i]) * 16, "q", "t", 2, 0, 5, 5, 1, b"", "", None, None) for i in range(3)]
    hub.enqueued(rows, {})
    assert [e.position for e in fits.take()] == [1, 2, 3] and fits.behind == 0
    assert len(filtered.take()) == 3
    hub.enqueued([*rows, rows[0]], {1: (b"", 0)})  # one deduplicated: three stored
    assert [e.position for e in fits.take()] == [4, 5, 6]
    assert cut.behind == 6  # the 3 buffered and the 3 that did not fit: cut off, counting on
    hub.enqueued(rows, {})
    assert cut.behind == 9 and cut.pending == []


_TEXT = st.text(st.characters(codec="utf-8"), max_size=6)
_EVENT = st.builds(
    JobEvent, st.integers(0, 2**64 - 1), st.sampled_from(sorted(ev.KIND_NAMES)), st.binary(min_size=16, max_size=16),
    st.sampled_from(["q", "r", "ü"]), st.sampled_from(["t", ""]), st.integers(0, 6), st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**31), 2**31 - 1), st.sampled_from(["", "w1"]), st.integers(-(2**63), 2**63 - 1), _TEXT, _TEXT,
    _TEXT, st.integers(-(2**63), 2**63 - 1), st.sampled_from(["n1", ""]))


@settings(max_examples=200, deadline=None, database=None)
@given(events=st.lists(_EVENT, min_size=1, max_size=40), runs=st.integers(1, 4))
def test_a_message_written_by_column_parses_as_the_message_object(events: list[JobEvent], runs: int) -> None:
    # Runs of one kind, most columns alike within a run (a busy stream), and anything at all.
    alike = [e._replace(kind=sorted(ev.KIND_NAMES)[i * runs // len(events)], state=2, error="")
             for i, e in enumerate(events)]
    for batch in (events, alike, alike[:1], [events[0]] * 3):
        assert ppb.WatchJobsResponse.FromString(encode_events(batch)) == events_message(batch)


def test_a_jobs_next_event_is_never_earlier_than_its_last_progress_up_to_the_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``JobEvents`` remembers each job's last progress time, for at most
    ``MAX_PROGRESS_TIMES`` jobs (here 3): at the bound every job's completion is lifted to
    its progress time; one past it, the oldest job is forgotten and its completion keeps its
    own time. A relayed event (another node's clock) is held to the same order."""
    monkeypatch.setattr(ev, "MAX_PROGRESS_TIMES", 3)
    hub = ev.JobEvents("n1", FakeClock())
    w = hub.watch()
    ids = [bytes([n]) * 16 for n in range(5)]

    def progress(job_id: bytes, at: int) -> None:
        hub.progressed(job_id, "q", "t", 1, "0.5", at)

    def completed_at(job_id: bytes, at: int, *, relayed: bool = False) -> int:
        event = JobEvent(0, ev.COMPLETED, job_id, "q", "t", 3, at, 1)
        if relayed:
            hub.publish(event, local=False)
        else:
            hub._deliver_all([event])
        return w.take()[-1].at

    for job_id in ids[:3]:
        progress(job_id, 100)
    assert [completed_at(job_id, 50) for job_id in ids[:3]] == [100, 100, 100]  # at the bound
    for job_id in ids[:4]:
        progress(job_id, 100)
    assert [completed_at(job_id, 50) for job_id in ids[:4]] == [50, 100, 100, 100]  # one past: the first forgotten
    progress(ids[4], 200)
    progress(ids[4], 150)  # a progress relayed late is not shown going back either
    assert w.take()[-1].at == 200
    assert completed_at(ids[4], 120, relayed=True) == 200
    assert completed_at(ids[4], 120) == 120  # the entry ended with the completion
