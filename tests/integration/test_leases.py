"""Leases (SPEC §3, §6): fencing by lease id, expiry, extension, idempotent acks, batched settle."""

from __future__ import annotations

import datetime as dt
import random
import time
import uuid
from collections.abc import Iterator

import grpc
import pytest
from support.failures import code_reason as refusal
from support.servers import ServerFactory, module_server
from support.waiting import past, wait_for
from support.worker import fast_queue, job_row, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

FAILED = grpc.StatusCode.FAILED_PRECONDITION


@pytest.fixture(scope="module")
def lease_server(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module; each test works on its ``fresh_queue``. Its queues' lease is
    long (``HELD``), so no script of acks outlasts one however slow the machine; a test that
    wants a lease to run out asks for ``SHORT`` in its Reserve."""
    yield from module_server(tmp_path_factory, backend, queue_defaults=fast_queue(lease_duration=HELD))


#: The module server's default lease: longer than any test here takes.
HELD = 60.0
#: A lease a test lets run out (the server sweeps every 0.05 s).
SHORT = 0.4
#: How long a test waits for something the server does within about ``SHORT`` plus a sweep
#: on a quiet machine: long enough for a loaded one, and it costs nothing when all is well.
PATIENCE = 10.0


def test_an_expired_lease_returns_the_job_and_the_next_delivery_has_a_new_lease_id(lease_server: ServerProcess,
                                                                                   fresh_queue: str) -> None:
    with wire_for(lease_server, fresh_queue) as w:
        job_id = w.enqueue()
        first = w.reserve_one(lease=SHORT)
        assert first.attempt == 1 and first.lease_id
        # Nobody settles it: after 0.4 s the sweep gives it back and the second worker's
        # waiting Reserve gets it then, not when its long poll ends.
        start = time.monotonic()
        second = w.reserve_one(lease=SHORT, wait=2 * PATIENCE)
        assert time.monotonic() - start < PATIENCE
        assert second.job.id == job_id
        assert second.lease_id != first.lease_id
        assert second.attempt == 2
        assert [a.outcome for a in second.job.attempts] == ["lease_expired"]
        # The first worker's late ack is refused: the lease id is no longer the job's.
        assert refusal(lambda: w.ack(first)) == (FAILED, "LEASE_MISMATCH")
        assert refusal(lambda: w.nack(first)) == (FAILED, "LEASE_MISMATCH")
        assert refusal(lambda: w.extend(first, 5)) == (FAILED, "LEASE_MISMATCH")
        w.ack(second)
        row = job_row(lease_server, job_id)
        assert row is not None and row.state == "COMPLETED" and row.attempt == 2


def test_the_right_lease_after_its_expiry_is_lease_expired(server_factory: ServerFactory) -> None:
    # A long sweep interval: the job is still RESERVED in the table when the ack comes.
    server = server_factory(queues={"q": fast_queue()}, sweep_interval=30.0)
    with wire_for(server) as w:
        job_id = w.enqueue()
        res = w.reserve_one(lease=0.2)
        past(res.lease_expires_at.ToMicroseconds() / 1e6, what="the lease's expiry")
        assert refusal(lambda: w.ack(res)) == (FAILED, "LEASE_EXPIRED")
        assert refusal(lambda: w.extend(res, 5)) == (FAILED, "LEASE_EXPIRED")
        assert refusal(lambda: w.nack(res, "release")) == (FAILED, "LEASE_EXPIRED")
        # ... and a wrong lease id is LEASE_MISMATCH even though the lease also expired (checked first).
        assert refusal(lambda: w.ack((job_id, "01900000-0000-7000-8000-000000000000"))) == (FAILED, "LEASE_MISMATCH")


def test_extend_keeps_the_lease_past_its_original_expiry(lease_server: ServerProcess, fresh_queue: str) -> None:
    # A 1 s lease, extended by 5 s at a time until well past its first expiry: each
    # extension runs from when it is written, so never ends before the call was sent plus
    # 5 s, and a slow call cannot let the lease lapse between two of them.
    with wire_for(lease_server, fresh_queue) as w:
        job_id = w.enqueue()
        res = w.reserve_one(lease=1.0)
        first_expiry = res.lease_expires_at.ToMicroseconds() / 1e6
        extensions = 0
        while extensions < 2 or time.time() < first_expiry + 0.3:
            sent_at_us = time.time_ns() // 1000
            resp = w.extend(res, 5.0)
            assert resp.lease_expires_at.ToMicroseconds() >= sent_at_us + 5_000_000
            assert resp.cancel_requested is False
            extensions += 1
            time.sleep(0.25)  # the pace of the extensions: time passing is what this test is about
        assert w.reserve(wait=0) == []  # past the first expiry, and the sweep has not given it to anyone
        w.ack(res)
        row = job_row(lease_server, job_id)
        assert row is not None and row.state == "COMPLETED" and row.attempt == 1


def test_the_last_attempts_lease_expiring_dead_letters_with_reason_lease_expired(lease_server: ServerProcess,
                                                                                 fresh_queue: str) -> None:
    with wire_for(lease_server, fresh_queue) as w:
        job_id = w.enqueue(max_attempts=2)
        w.reserve_one(lease=SHORT)
        second = w.reserve_one(lease=SHORT, wait=PATIENCE)  # attempt 1's lease ran out: delivered again
        assert second.attempt == 2
        wait_for(lambda: (r := job_row(lease_server, job_id)) is not None and r.state == "DEAD_LETTERED",
                 timeout=PATIENCE, what="dead-letter after the last lease expired")
        row = job_row(lease_server, job_id)
        assert row is not None and row.reason == "LEASE_EXPIRED"
        assert [h["outcome"] for h in row.history] == ["lease_expired", "lease_expired"]
        assert w.reserve(wait=0.3) == []
        assert refusal(lambda: w.ack(second)) == (FAILED, "LEASE_EXPIRED")


def test_a_repeated_ack_by_the_completing_lease_succeeds_again(shared_server: ServerProcess) -> None:
    with wire_for(shared_server) as w:
        w.enqueue()
        res = w.reserve_one()
        w.ack(res)
        w.ack(res)  # idempotent: a worker may retry a lost ack
        w.ack(res)
        # ... but not a nack: the job is no longer held.
        assert refusal(lambda: w.nack(res)) == (FAILED, "LEASE_EXPIRED")


def test_settling_an_unknown_job_is_not_found_and_a_malformed_id_is_invalid(shared_server: ServerProcess) -> None:
    with wire_for(shared_server) as w:
        unknown = ("01900000-0000-7000-8000-000000000001", "01900000-0000-7000-8000-000000000002")
        assert refusal(lambda: w.ack(unknown)) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")
        assert refusal(lambda: w.ack(("nope", "nope")))[0] == grpc.StatusCode.INVALID_ARGUMENT


def test_a_batched_settle_answers_each_item_in_order(lease_server: ServerProcess, fresh_queue: str) -> None:
    with wire_for(lease_server, fresh_queue) as w:
        ids = [w.enqueue(max_attempts=5) for _ in range(4)]
        got = w.reserve(max_jobs=4)
        assert [r.job.id for r in got] == ids
        a, b, c, d = got
        items = [
            wpb.SettleItem(ack=wpb.AckRequest(job_id=a.job.id, lease_id=a.lease_id)),
            wpb.SettleItem(nack=wpb.NackRequest(job_id=b.job.id, lease_id=b.lease_id, release=wpb.ReleaseDirective())),
            # wrong lease (the jobs of one Reserve share theirs: a lease is job id + lease id)
            wpb.SettleItem(ack=wpb.AckRequest(job_id=c.job.id, lease_id=str(uuid.uuid4()))),
            wpb.SettleItem(nack=wpb.NackRequest(job_id=d.job.id, lease_id=d.lease_id, dead_letter="bad input")),
            wpb.SettleItem(ack=wpb.AckRequest(job_id="garbage", lease_id="garbage")),
            wpb.SettleItem(ack=wpb.AckRequest(job_id=a.job.id, lease_id=a.lease_id)),  # repeat: ok again
        ]
        results = w.settle(items)
        assert [r.ok for r in results] == [True, True, False, True, False, True]
        assert results[0].state == pb.COMPLETED
        assert results[1].state == pb.READY
        assert results[2].error_reason == "LEASE_MISMATCH"
        assert results[3].state == pb.DEAD_LETTERED
        assert results[4].error_reason == "INVALID_ARGUMENT"
        row = job_row(lease_server, d.job.id)
        assert row is not None and row.reason == "NACK_DEAD_LETTER: bad input"
        # c is untouched and still held by its lease.
        w.ack(c)


def test_a_folded_settle_answers_refused_and_repeated_acks_per_item(lease_server: ServerProcess,
                                                                    fresh_queue: str) -> None:
    # Distinct jobs only, so the acks are folded into one statement: the ones it cannot
    # complete (wrong lease, already completed, unknown) are answered one by one, in place.
    with wire_for(lease_server, fresh_queue) as w:
        ids = [w.enqueue(max_attempts=5) for _ in range(5)]
        a, b, c, d, e = w.reserve(max_jobs=5)
        w.ack(b)  # completed before the batch: its repeated ack succeeds again
        unknown = "01900000-0000-7000-8000-000000000001"
        results = w.settle([
            wpb.SettleItem(ack=wpb.AckRequest(job_id=a.job.id, lease_id=a.lease_id)),
            wpb.SettleItem(ack=wpb.AckRequest(job_id=b.job.id, lease_id=b.lease_id)),
            wpb.SettleItem(ack=wpb.AckRequest(job_id=c.job.id, lease_id=str(uuid.uuid4()))),
            wpb.SettleItem(nack=wpb.NackRequest(job_id=d.job.id, lease_id=d.lease_id, release=wpb.ReleaseDirective())),
            wpb.SettleItem(ack=wpb.AckRequest(job_id=unknown, lease_id=e.lease_id)),
            wpb.SettleItem(ack=wpb.AckRequest(job_id=e.job.id, lease_id=e.lease_id)),
        ])
        assert [r.ok for r in results] == [True, True, False, True, False, True]
        assert [r.state for r in results if r.ok] == [pb.COMPLETED, pb.COMPLETED, pb.READY, pb.COMPLETED]
        assert [r.error_reason for r in results if not r.ok] == ["LEASE_MISMATCH", "JOB_NOT_FOUND"]
        rows = [job_row(lease_server, i) for i in ids]
        assert [r.state if r else None for r in rows] == ["COMPLETED", "COMPLETED", "RESERVED", "READY", "COMPLETED"]
        w.ack(c)  # still held by its own lease


def test_a_reserve_whose_caller_gave_up_leaves_no_job_held(server_factory: ServerFactory) -> None:
    # Every commit takes 0.3 s, so the caller's 0.1 s deadline passes while the store is
    # leasing the job: the server must give it back instead of holding it for a lease.
    server = server_factory(queues={"q": fast_queue(lease_duration=30.0)}, debug_commit_delay=0.3)
    with wire_for(server) as w:
        job_id = w.enqueue()
        req = wpb.ReserveRequest(queues=["q"], max_jobs=1, worker_id="impatient")
        code, _ = refusal(lambda: w.worker.Reserve(req, timeout=0.1))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        res = w.reserve_one(wait=3.0)
        assert res.job.id == job_id
        assert res.attempt == 1, "an undelivered reservation must not spend an attempt"


def test_a_reserve_never_answers_more_than_the_message_cap(server_factory: ServerFactory) -> None:
    # 3 jobs of 40 KB cannot travel in one 64 KiB message: the server sends what fits and
    # gives the rest back at once, in place and with their attempt unspent.
    small = {"max_payload_bytes": 60000}
    server = server_factory(limits={"max_message_bytes": 65536}, queue_defaults={"limits": small},
                            queues={"q": fast_queue(limits=small)})
    with wire_for(server) as w:
        ids = [w.enqueue(data=bytes([i]) * 40000) for i in range(3)]
        got = w.reserve(max_jobs=3)
        assert [r.job.id for r in got] == ids[:1]
        rest = w.reserve(max_jobs=3) + w.reserve(max_jobs=3)
        assert [r.job.id for r in rest] == ids[1:]
        assert [r.attempt for r in rest] == [1, 1]


def test_one_settle_of_more_acks_than_a_statement_holds_completes_them_all(server_factory: ServerFactory) -> None:
    # 600 acks in one Settle: the store folds them into UPDATEs of at most 256 acks each
    # (one more past a chunk boundary: 256 + 256 + 88); every one completes, in order.
    server = server_factory(queues={"q": fast_queue(lease_duration=30.0)})
    with wire_for(server) as w:
        for n in (256, 256, 88):
            w.enqueue_many([pb.EnqueueRequest(queue="q", job_type="t") for _ in range(n)])
        got = w.reserve(max_jobs=256) + w.reserve(max_jobs=256) + w.reserve(max_jobs=256)
        assert len(got) == 600
        results = w.settle([wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id)) for r in got])
        assert len(results) == 600
        assert all(r.ok and r.state == pb.COMPLETED for r in results)
        assert w.reserve(max_jobs=256, wait=0) == []


def test_a_settle_of_acks_only_answers_refused_repeated_and_non_canonical_ids_per_item(
        lease_server: ServerProcess, fresh_queue: str) -> None:
    # Acks only: the one-match id parse of the whole call. Ids in upper case are canonical
    # (the fast parse); one in braces is not (the whole call goes item by item, same answers).
    with wire_for(lease_server, fresh_queue) as w:
        ids = [w.enqueue(max_attempts=5) for _ in range(4)]
        a, b, c, d = w.reserve(max_jobs=4)
        w.ack(b)  # its repeated ack succeeds again
        unknown = "01900000-0000-7000-8000-000000000001"
        results = w.settle([
            wpb.SettleItem(ack=wpb.AckRequest(job_id=a.job.id.upper(), lease_id=a.lease_id.upper())),
            wpb.SettleItem(ack=wpb.AckRequest(job_id=b.job.id, lease_id=b.lease_id)),
            wpb.SettleItem(ack=wpb.AckRequest(job_id=c.job.id, lease_id=str(uuid.uuid4()))),
            wpb.SettleItem(ack=wpb.AckRequest(job_id=unknown, lease_id=d.lease_id)),
        ])
        assert [r.ok for r in results] == [True, True, False, False]
        assert [r.state for r in results if r.ok] == [pb.COMPLETED, pb.COMPLETED]
        assert [r.error_reason for r in results if not r.ok] == ["LEASE_MISMATCH", "JOB_NOT_FOUND"]
        braced = w.settle([wpb.SettleItem(ack=wpb.AckRequest(job_id="{" + c.job.id + "}", lease_id=c.lease_id)),
                           wpb.SettleItem(ack=wpb.AckRequest(job_id=d.job.id, lease_id=d.lease_id)),
                           wpb.SettleItem(ack=wpb.AckRequest(job_id=d.job.id + "0", lease_id=d.lease_id))])
        assert [(r.ok, r.state, r.error_reason) for r in braced] == [
            (True, pb.COMPLETED, ""), (True, pb.COMPLETED, ""), (False, pb.JOB_STATE_UNSPECIFIED, "INVALID_ARGUMENT")]
        rows = [job_row(lease_server, i) for i in ids]
        assert [r.state if r else None for r in rows] == ["COMPLETED"] * 4


def test_every_reservation_of_a_mixed_reserve_is_the_job_as_stored(lease_server: ServerProcess,
                                                                  fresh_queue: str) -> None:
    # One Reserve of jobs that share some fields and differ in others (type, priority,
    # attempts, payload, key, custom map): each reservation carries exactly its own job.
    with wire_for(lease_server, fresh_queue) as w:
        ids = [
            w.enqueue(job_type="a", data=b"1"), w.enqueue(job_type="a", data=b"22"),
            w.enqueue(job_type="b", data=b""), w.enqueue(job_type="a", max_attempts=3, data=b"4"),
            w.enqueue(job_type="a", idempotency_key="k1", data=b"5"),
            w.enqueue(job_type="a", custom={"n": pb.CustomValue(int_value=7)}, data=b"6"),
            w.enqueue(job_type="a", data=b"7"),
        ]
        got = w.reserve(max_jobs=len(ids))
        assert [r.job.id for r in got] == ids
        assert len({r.lease_id for r in got}) == 1
        for r in got:
            stored = w.get_job(r.job.id)
            del stored.attempts[:]  # history of the running attempt: not part of a reservation
            assert r.job == stored
            assert r.attempt == 1 and r.lease_expires_at == stored.lease_expires_at
        assert [r.job.payload.data for r in got] == [b"1", b"22", b"", b"4", b"5", b"6", b"7"]
        w.settle([wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id)) for r in got])


def test_acks_only_settle_parses_each_id_on_its_own_not_the_call_s_ids_run_together(
        lease_server: ServerProcess, fresh_queue: str) -> None:
    # The one-match parse of an acks-only Settle must not let a character move from one id
    # to the next: a 35-character job id and a 37-character lease id that together spell two
    # canonical ids are two malformed ids (INVALID_ARGUMENT), as item by item; so is an item
    # with empty ids, or one whose job id holds a job id and its lease id run together.
    with wire_for(lease_server, fresh_queue) as w:
        for _ in range(3):
            w.enqueue()
        a, b, c = w.reserve(max_jobs=3)

        def settle(items: list[wpb.SettleItem]) -> list[tuple[bool, str]]:
            return [(r.ok, r.error_reason) for r in w.settle(items)]

        shifted = wpb.SettleItem(ack=wpb.AckRequest(job_id=a.job.id[:35], lease_id=a.job.id[35:] + a.lease_id))
        assert settle([shifted]) == [(False, "INVALID_ARGUMENT")]
        glued = wpb.SettleItem(ack=wpb.AckRequest(job_id=b.job.id + b.lease_id, lease_id=""))
        assert settle([glued, wpb.SettleItem(ack=wpb.AckRequest())]) == [(False, "INVALID_ARGUMENT")] * 2
        assert settle([wpb.SettleItem(ack=wpb.AckRequest(job_id=c.job.id))]) == [(False, "INVALID_ARGUMENT")]
        assert settle([wpb.SettleItem(ack=wpb.AckRequest())]) == [(False, "INVALID_ARGUMENT")]
        assert [job_row(lease_server, r.job.id).state for r in (a, b, c)] == ["RESERVED"] * 3  # type: ignore[union-attr]
        w.settle([wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id)) for r in (a, b, c)])


def _id_form(text: str, form: str) -> str:
    """``text`` (a canonical id) written in ``form``: one the fast parse takes, one only
    ``uuid.UUID`` takes, or one nothing takes."""
    arabic = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
    fullwidth = str.maketrans("0123456789abcdef", "０１２３４５６７８９ａｂｃｄｅｆ")
    return {
        "canonical": text, "upper": text.upper(), "braces": "{" + text + "}", "urn": "urn:uuid:" + text,
        "no_dashes": text.replace("-", ""), "spaces": " " + text + " ", "arabic": text.translate(arabic),
        "fullwidth": text.translate(fullwidth), "nul": text[:20] + "\x00" + text[21:], "short": text[:35],
        "long": text + "0", "empty": "",
    }[form]


_FORMS = ["canonical", "upper", "braces", "urn", "no_dashes", "spaces", "arabic", "fullwidth", "nul", "short",
          "long", "empty"]


def test_an_acks_only_settle_answers_as_the_item_by_item_path_for_any_ids(lease_server: ServerProcess,
                                                                          fresh_queue: str) -> None:
    # The same script of acks against two identical sets of jobs: once as is (acks only: the
    # one-match parse when every id is canonical), once with a nack of an unknown job added
    # (which takes the item-by-item path). Every item's answer and every job's state match.
    rnd = random.Random(7)
    with wire_for(lease_server, fresh_queue) as w:
        for rounds in range(30):
            n = rnd.choice([1, 3, 8])
            sets = []
            for name in ("a", "b"):
                queue = f"{fresh_queue}-{name}{rounds}"
                ids = [w.enqueue(queue=queue) for _ in range(n)]
                got = w.reserve([queue], max_jobs=n // 2 + 1) + w.reserve([queue], max_jobs=n)
                by_id = {r.job.id: r for r in got}
                sets.append(([by_id[i] for i in ids], queue))
            lenient = rnd.random() < 0.5  # half the scripts use canonical ids only (the fast parse)
            script = []
            for _ in range(rnd.choice([1, 2, 5, 12])):
                k = rnd.randrange(n + 1)  # n: an unknown job
                lease = rnd.choice(["own", "own", "other", "random"])
                forms = ("canonical", "upper") if not lenient else _FORMS
                script.append((k, lease, rnd.choice(forms), rnd.choice(forms)))
            answers = []
            for side, (res, _queue) in enumerate(sets):
                items = []
                for k, lease, job_form, lease_form in script:
                    job_id = res[k].job.id if k < n else "01900000-0000-7000-8000-00000000abcd"
                    lease_id = {"own": res[k % n].lease_id, "other": res[(k + 1) % n].lease_id,
                                "random": str(uuid.uuid4())}[lease]
                    items.append(wpb.SettleItem(ack=wpb.AckRequest(job_id=_id_form(job_id, job_form),
                                                                   lease_id=_id_form(lease_id, lease_form))))
                if side:
                    items.append(wpb.SettleItem(nack=wpb.NackRequest(job_id="01900000-0000-7000-8000-00000000dcba",
                                                                     lease_id=str(uuid.uuid4()),
                                                                     release=wpb.ReleaseDirective())))
                results = w.settle(items)[:len(script)]
                answers.append(([(r.ok, r.state, r.error_reason) for r in results],
                                [job_row(lease_server, r.job.id).state for r in res]))  # type: ignore[union-attr]
            assert answers[0] == answers[1], script


def test_every_reservation_of_a_reserve_with_retried_traced_and_promoted_jobs_is_the_job_as_stored(
        lease_server: ServerProcess, fresh_queue: str) -> None:
    # Plain jobs (the template copy) among retried ones (attempt history, attempt 2),
    # traced ones, scheduled ones promoted by the time they are reserved, other encodings,
    # priorities and max_attempts, in one Reserve: each reservation is its job as GetJob shows it.
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.3)
    trace = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with wire_for(lease_server, fresh_queue) as w:
        retried = [w.enqueue(job_type="a", data=b"r1"), w.enqueue(job_type="a", data=b"r2")]
        for r in w.reserve(max_jobs=2):
            w.nack(r, "retry_after", delay=0.2)
        ids = [
            *retried, w.enqueue(job_type="a", data=b"p1"), w.enqueue(job_type="a", data=b"p2", trace_context=trace),
            w.enqueue(job_type="a", data=b"s1", scheduled_at=soon),
            w.enqueue(job_type="a", data=b"s2", scheduled_at=soon),
            *w.enqueue_many([pb.EnqueueRequest(queue=fresh_queue, job_type="a",
                                               payload=pb.Payload(data=b"p3", encoding="application/json"))]),
            w.enqueue(job_type="a", priority=9, data=b"hi"), w.enqueue(job_type="a", max_attempts=2, data=b"m2"),
            w.enqueue(job_type="a", data=b""), w.enqueue(job_type="a", data=b"p4"),
        ]
        # Every job is due within 0.3 s; wait until the server shows them all READY, then one Reserve.
        wait_for(lambda: all((r := job_row(lease_server, i)) is not None and r.state == "READY" for i in ids),
                 timeout=PATIENCE, what="the retried and scheduled jobs due")
        got = w.reserve(max_jobs=len(ids) + 5)
        assert sorted(r.job.id for r in got) == sorted(ids)
        for r in got:
            stored = w.get_job(r.job.id)
            stored_attempts = list(stored.attempts)
            del stored.attempts[:]
            want = [a for a in stored_attempts if a.attempt != r.attempt]  # all but the running one
            assert list(r.job.attempts) == want, r.job.id
            del r.job.attempts[:]
            assert r.job == stored, r.job.id
        assert {r.job.id: r.attempt for r in got if r.job.id in retried} == dict.fromkeys(retried, 2)
        w.settle([wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id)) for r in got])


def test_an_acks_only_settle_of_expired_leases_answers_as_the_item_by_item_path(
        server_factory: ServerFactory) -> None:
    # Expired leases (still RESERVED in the table: no sweep yet), live ones and repeats of
    # one job in one acks-only Settle: the same answers as with a nack added (item by item).
    server = server_factory(queues={"a": fast_queue(), "b": fast_queue()}, sweep_interval=30.0)
    with wire_for(server) as w:
        answers = []
        for side, queue in enumerate(("a", "b")):
            for _ in range(3):
                w.enqueue(queue=queue)
            expired = w.reserve([queue], max_jobs=2, lease=0.2)
            past(max(r.lease_expires_at.ToMicroseconds() for r in expired) / 1e6, what="the leases' expiry")
            live = w.reserve([queue], max_jobs=1, lease=30)
            items = [wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id))
                     for r in (expired[0], live[0], expired[1], live[0], expired[0])]
            if side:
                items.append(wpb.SettleItem(nack=wpb.NackRequest(job_id=str(uuid.uuid4()), lease_id=str(uuid.uuid4()),
                                                                 release=wpb.ReleaseDirective())))
            answers.append([(r.ok, r.state, r.error_reason) for r in w.settle(items)[:5]])
        assert answers[0] == answers[1]
        assert [a[2] for a in answers[0]] == ["LEASE_EXPIRED", "", "LEASE_EXPIRED", "", "LEASE_EXPIRED"]
