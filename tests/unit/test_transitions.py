"""The transition rules of ``sepp.domain.transitions`` at their edges, with exact values
(SPEC §1, §3, §6). Pure functions: no store, no clock, no randomness."""

from __future__ import annotations

import json

import pytest

from sepp.domain.params import SettleError, SettleKind, SettleParams, SettleResult
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.states import State
from sepp.domain.transitions import (
    ATTEMPTS_EXHAUSTED,
    CANCELLED_BY_ADMIN,
    CANCELLED_WHILE_RESERVED,
    LEASE_EXPIRED,
    CancelAction,
    CancelDecision,
    Decision,
    ExpiredLease,
    HeldJob,
    Redrive,
    ack,
    cancel,
    history_entry,
    lease_error,
    nack,
    reclaim,
    redrive,
    repeated_ack,
    settle,
)

S = 1_000_000  # one second in µs
NOW = 1_767_225_600_000_000
LEASE, OTHER = b"L" * 16, b"O" * 16
JOB = b"J" * 16
POLICY = QueuePolicy(backoff_base=S, backoff_cap=8 * S, jitter=0.2, completed_retention=60 * S,
                     dead_retention=600 * S)
TABLE = PolicyTable(POLICY)
RUN_AT = NOW - 30 * S
STARTED = NOW - 10 * S
NODE = "node-a"  # the node that leased the job (attempt history names the node)


def _job(attempt: int = 1, max_attempts: int = 3, *, state: int = int(State.RESERVED), lease: bytes | None = LEASE,
         expires: int | None = NOW + S, cancel_requested: int = 0, worker: str | None = "w1",
         node: str | None = NODE) -> HeldJob:
    return HeldJob("emails", state, lease, expires, attempt, max_attempts, worker, STARTED, cancel_requested, RUN_AT,
                   node)


def _p(kind: SettleKind, *, delay: int = -1, reason: str = "", outcome: str = "", lease: bytes = LEASE,
       message: str = "boom", detail: str = "trace") -> SettleParams:
    return SettleParams(JOB, lease, kind, NOW, delay, reason, outcome, message, detail)


def _entry(attempt: int, outcome: str, message: str = "boom", detail: str = "trace", *, ended: int = NOW,
           worker: str = "w1", node: str = NODE) -> str:
    return (f'{{"attempt":{attempt},"worker_id":"{worker}","node":"{node}","started_at":{STARTED},"ended_at":{ended},'
            f'"outcome":"{outcome}","error_message":"{message}","error_detail":"{detail}"}}')


def _no_policy(queue: str) -> QueuePolicy:
    raise AssertionError(f"policy of {queue!r} looked up")


# ---------------------------------------------------------------------- history entries


def test_a_history_entry_is_compact_json_in_a_fixed_field_order() -> None:
    assert history_entry(2, "w1", STARTED, NOW, "retry", "boom", "trace", NODE) == _entry(2, "retry")
    text = history_entry(1, None, None, NOW, "release", "", "")
    assert text == f'{{"attempt":1,"worker_id":"","node":"","started_at":null,"ended_at":{NOW},"outcome":"release",' \
                   '"error_message":"","error_detail":""}'
    assert json.loads(history_entry(1, "w", 5, 6, "x", 'quote " and é', ""))["error_message"] == 'quote " and é'


# ---------------------------------------------------------------------- lease verdicts


def test_no_job_is_not_found() -> None:
    assert lease_error(None, LEASE, NOW) is SettleError.NOT_FOUND


def test_a_wrong_lease_is_a_mismatch_before_anything_else() -> None:
    assert lease_error(_job(), OTHER, NOW) is SettleError.LEASE_MISMATCH
    # checked first: also on an expired lease and on a job no longer reserved
    assert lease_error(_job(expires=NOW - 1), OTHER, NOW) is SettleError.LEASE_MISMATCH
    assert lease_error(_job(state=int(State.COMPLETED)), OTHER, NOW) is SettleError.LEASE_MISMATCH
    assert lease_error(_job(lease=None), LEASE, NOW) is SettleError.LEASE_MISMATCH


@pytest.mark.parametrize(("expires", "state", "verdict"), [
    (NOW + 1, State.RESERVED, None),                       # live by one µs
    (NOW, State.RESERVED, SettleError.LEASE_EXPIRED),      # gone at lease_expires_at
    (NOW - 1, State.RESERVED, SettleError.LEASE_EXPIRED),
    (None, State.RESERVED, SettleError.LEASE_EXPIRED),
    (NOW + S, State.READY, SettleError.LEASE_EXPIRED),     # reclaimed: the lease id stayed
    (NOW + S, State.COMPLETED, SettleError.LEASE_EXPIRED),
    (NOW + S, State.DEAD_LETTERED, SettleError.LEASE_EXPIRED),
])
def test_the_right_lease_is_live_only_while_reserved_and_before_expiry(
        expires: int | None, state: State, verdict: SettleError | None) -> None:
    assert lease_error(_job(expires=expires, state=int(state)), LEASE, NOW) is verdict


# ---------------------------------------------------------------------- ack


def test_an_ack_completes_now_and_leaves_run_at_attempt_and_history_alone() -> None:
    decision = ack(_job(attempt=2), NOW, POLICY)
    assert decision == Decision(int(State.COMPLETED), None, 2, NOW, NOW + 60 * S, None, None)
    assert decision.result("emails") == SettleResult(None, int(State.COMPLETED), NOW, 2, "emails")
    assert settle(_job(attempt=2), _p(SettleKind.ACK), TABLE, 0.7) == decision


def test_a_repeated_ack_by_the_completing_lease_succeeds_again_without_a_write() -> None:
    done = _job(attempt=3, state=int(State.COMPLETED))
    again = SettleResult(None, int(State.COMPLETED), 0, 3, "emails")
    assert repeated_ack(done, SettleError.LEASE_EXPIRED, SettleKind.ACK) == again
    assert settle(done, _p(SettleKind.ACK), TABLE, 0.0) == again


@pytest.mark.parametrize(("job", "p", "error"), [
    (_job(state=int(State.COMPLETED)), _p(SettleKind.ACK, lease=OTHER), SettleError.LEASE_MISMATCH),
    (_job(state=int(State.COMPLETED)), _p(SettleKind.RETRY), SettleError.LEASE_EXPIRED),
    (_job(state=int(State.DEAD_LETTERED)), _p(SettleKind.ACK), SettleError.LEASE_EXPIRED),
    (_job(expires=NOW), _p(SettleKind.ACK), SettleError.LEASE_EXPIRED),
    (None, _p(SettleKind.ACK), SettleError.NOT_FOUND),
])
def test_a_refused_settle_writes_nothing_and_says_why(job: HeldJob | None, p: SettleParams,
                                                       error: SettleError) -> None:
    assert settle(job, p, _no_policy, 0.0) == SettleResult(error)
    if job is not None:
        assert repeated_ack(job, error, p.kind) is None


# ---------------------------------------------------------------------- retry


def test_a_retry_before_the_last_attempt_is_scheduled_after_the_backoff() -> None:
    decision = nack(_job(attempt=2, max_attempts=3), _p(SettleKind.RETRY), POLICY, 0.0)
    assert decision == Decision(int(State.SCHEDULED), NOW + 2 * S, 2, None, None, None, _entry(2, "retry"))
    assert decision.result("emails") == SettleResult(None, int(State.SCHEDULED), NOW + 2 * S, 2, "emails")


@pytest.mark.parametrize("attempt", [3, 4])
def test_a_retry_on_or_past_the_last_attempt_is_dead_lettered_attempts_exhausted(attempt: int) -> None:
    decision = nack(_job(attempt=attempt, max_attempts=3), _p(SettleKind.RETRY, outcome="failed"), POLICY, 0.5)
    # the history says what happened, not what was asked (the outcome given is replaced)
    assert decision == Decision(int(State.DEAD_LETTERED), NOW, attempt, NOW, NOW + 600 * S, ATTEMPTS_EXHAUSTED,
                                _entry(attempt, "attempts_exhausted"))
    assert decision.result("q").run_at == NOW


def test_max_attempts_one_is_never_retried() -> None:
    assert nack(_job(attempt=1, max_attempts=1), _p(SettleKind.RETRY), POLICY, 0.0).reason == ATTEMPTS_EXHAUSTED


@pytest.mark.parametrize(("attempt", "rand", "delay"), [
    (1, 0.0, S),                 # base × 2^0
    (2, 0.0, 2 * S),
    (4, 0.0, 8 * S),             # base × 2^3 = the cap exactly
    (5, 0.0, 8 * S),             # capped
    (60, 0.0, 8 * S),            # far past the cap (the exponent is bounded)
    (1, 1.0, 1_200_000),         # jitter +20 %
    (1, -1.0, 800_000),          # jitter −20 %
    (5, 1.0, 9_600_000),         # the jitter applies after the cap
    (5, -0.5, 7_200_000),
])
def test_the_backoff_doubles_caps_then_jitters(attempt: int, rand: float, delay: int) -> None:
    decision = nack(_job(attempt=attempt, max_attempts=100), _p(SettleKind.RETRY), POLICY, rand)
    assert (decision.state, decision.run_at) == (int(State.SCHEDULED), NOW + delay)


def test_a_full_negative_jitter_with_jitter_one_makes_the_retry_ready_now() -> None:
    policy = QueuePolicy(backoff_base=S, backoff_cap=8 * S, jitter=1.0)
    decision = nack(_job(), _p(SettleKind.RETRY), policy, -1.0)
    assert (decision.state, decision.run_at) == (int(State.READY), NOW)


@pytest.mark.parametrize(("delay", "state"), [(0, State.READY), (1, State.SCHEDULED), (90 * S, State.SCHEDULED)])
def test_an_explicit_delay_replaces_the_backoff_and_zero_is_ready_now(delay: int, state: State) -> None:
    decision = nack(_job(attempt=2), _p(SettleKind.RETRY, delay=delay, outcome="retry_after"), POLICY, 1.0)
    assert decision == Decision(int(state), NOW + delay, 2, None, None, None, _entry(2, "retry_after"))


def test_an_explicit_delay_still_dead_letters_on_the_last_attempt() -> None:
    decision = nack(_job(attempt=3, max_attempts=3), _p(SettleKind.RETRY, delay=0), POLICY, 0.0)
    assert (decision.state, decision.reason) == (int(State.DEAD_LETTERED), ATTEMPTS_EXHAUSTED)


# ---------------------------------------------------------------------- dead letter and release


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_a_dead_letter_nack_records_its_reason_at_any_attempt(attempt: int) -> None:
    decision = nack(_job(attempt=attempt, max_attempts=3), _p(SettleKind.DEAD_LETTER, reason="NACK_DEAD_LETTER"),
                    POLICY, 0.0)
    assert decision == Decision(int(State.DEAD_LETTERED), NOW, attempt, NOW, NOW + 600 * S, "NACK_DEAD_LETTER",
                                _entry(attempt, "dead_letter"))


def test_a_release_gives_the_attempt_back_and_keeps_the_place_in_the_queue() -> None:
    decision = nack(_job(attempt=3, max_attempts=3), _p(SettleKind.RELEASE, message="", detail=""), POLICY, 0.0)
    # even on the last attempt: a release spends none
    assert decision == Decision(int(State.READY), RUN_AT, 2, None, None, None, _entry(3, "release", "", ""))
    assert decision.result("emails") == SettleResult(None, int(State.READY), RUN_AT, 2, "emails")


def test_the_outcome_label_defaults_to_the_kind() -> None:
    assert json.loads(nack(_job(), _p(SettleKind.RETRY, outcome="timeout"), POLICY, 0.0).entry or "")[
        "outcome"] == "timeout"
    assert json.loads(nack(_job(), _p(SettleKind.RETRY), POLICY, 0.0).entry or "")["outcome"] == "retry"


def test_a_missing_worker_id_is_written_as_empty_text() -> None:
    decision = nack(_job(worker=None), _p(SettleKind.RETRY), POLICY, 0.0)
    assert json.loads(decision.entry or "")["worker_id"] == ""


def test_the_entry_names_the_node_that_leased_the_job_and_an_unknown_node_is_empty_text() -> None:
    # Attempt history names the node (the key follows worker_id)
    entry = json.loads(nack(_job(), _p(SettleKind.DEAD_LETTER), POLICY, 0.0).entry or "")
    assert list(entry)[:3] == ["attempt", "worker_id", "node"] and entry["node"] == NODE
    assert json.loads(reclaim(_expired(1), NOW, _no_policy).entry or "")["node"] == NODE
    assert json.loads(nack(_job(node=None), _p(SettleKind.RELEASE), POLICY, 0.0).entry or "")["node"] == ""


# ---------------------------------------------------------------------- cancel while reserved


def test_a_retry_of_a_job_asked_to_cancel_is_cancelled_with_its_would_be_run_at() -> None:
    decision = nack(_job(attempt=1, cancel_requested=1), _p(SettleKind.RETRY), POLICY, 0.0)
    assert decision == Decision(int(State.CANCELLED), NOW + S, 1, NOW, NOW + 600 * S, CANCELLED_WHILE_RESERVED,
                                _entry(1, "retry"))


def test_a_release_of_a_job_asked_to_cancel_is_cancelled_with_the_attempt_given_back() -> None:
    decision = nack(_job(attempt=2, cancel_requested=1), _p(SettleKind.RELEASE), POLICY, 0.0)
    assert decision == Decision(int(State.CANCELLED), RUN_AT, 1, NOW, NOW + 600 * S, CANCELLED_WHILE_RESERVED,
                                _entry(2, "release"))


def test_a_cancel_request_does_not_override_a_dead_letter_or_an_ack() -> None:
    exhausted = nack(_job(attempt=3, cancel_requested=1), _p(SettleKind.RETRY), POLICY, 0.0)
    assert (exhausted.state, exhausted.reason) == (int(State.DEAD_LETTERED), ATTEMPTS_EXHAUSTED)
    told = nack(_job(cancel_requested=1), _p(SettleKind.DEAD_LETTER, reason="bad"), POLICY, 0.0)
    assert (told.state, told.reason) == (int(State.DEAD_LETTERED), "bad")
    assert ack(_job(cancel_requested=1), NOW, POLICY).state == int(State.COMPLETED)


# ---------------------------------------------------------------------- lease expiry (reclaim)


def _expired(attempt: int, max_attempts: int = 3, cancel_requested: int = 0) -> ExpiredLease:
    return ExpiredLease("emails", attempt, max_attempts, "w1", STARTED, NOW - 5 * S, cancel_requested, NODE)


def _lease_entry(attempt: int) -> str:
    return _entry(attempt, "lease_expired", "lease expired", "", ended=NOW - 5 * S)


def test_an_expired_lease_with_attempts_left_goes_back_to_ready_keeping_run_at_and_attempt() -> None:
    # no policy needed: nothing is given a purge time
    assert reclaim(_expired(2), NOW, _no_policy) == Decision(int(State.READY), None, 2, None, None, None,
                                                             _lease_entry(2))


@pytest.mark.parametrize("attempt", [3, 4])
def test_an_expired_lease_on_or_past_the_last_attempt_is_dead_lettered_lease_expired(attempt: int) -> None:
    assert reclaim(_expired(attempt), NOW, TABLE) == Decision(
        int(State.DEAD_LETTERED), NOW - 5 * S, attempt, NOW, NOW + 600 * S, LEASE_EXPIRED, _lease_entry(attempt))


@pytest.mark.parametrize("attempt", [1, 3])
def test_an_expired_lease_of_a_job_asked_to_cancel_is_cancelled_even_on_the_last_attempt(attempt: int) -> None:
    assert reclaim(_expired(attempt, cancel_requested=1), NOW, TABLE) == Decision(
        int(State.CANCELLED), NOW - 5 * S, attempt, NOW, NOW + 600 * S, CANCELLED_WHILE_RESERVED,
        _lease_entry(attempt))


def test_the_reclaim_uses_the_policy_of_the_jobs_queue() -> None:
    table = PolicyTable(QueuePolicy(), {"emails": QueuePolicy(dead_retention=7 * S)})
    assert reclaim(_expired(3), NOW, table).purge_at == NOW + 7 * S


# ---------------------------------------------------------------------- admin cancel


@pytest.mark.parametrize("state", [State.SCHEDULED, State.READY])
def test_an_admin_cancel_finishes_a_waiting_job_now(state: State) -> None:
    assert cancel(int(state), NOW, POLICY, "stop it") == CancelDecision(CancelAction.CANCEL, NOW, NOW + 600 * S,
                                                                        "stop it")
    assert cancel(int(state), NOW, POLICY, "").reason == CANCELLED_BY_ADMIN == "cancelled by admin"


@pytest.mark.parametrize(("state", "action"), [
    (State.RESERVED, CancelAction.REQUEST),
    (State.CANCELLED, CancelAction.UNCHANGED),
    (State.COMPLETED, CancelAction.WRONG_STATE),
    (State.DEAD_LETTERED, CancelAction.WRONG_STATE),
    (99, CancelAction.WRONG_STATE),                   # a state no sepp writes (a damaged row)
])
def test_an_admin_cancel_of_any_other_state_writes_no_columns(state: int, action: CancelAction) -> None:
    assert cancel(int(state), NOW, POLICY, "x") == CancelDecision(action)


# ---------------------------------------------------------------------- redrive


@pytest.mark.parametrize("state", [State.DEAD_LETTERED, State.CANCELLED])
def test_a_redrive_makes_a_finished_job_ready_now_with_attempt_zero(state: State) -> None:
    assert redrive(int(state), NOW) == Redrive(int(State.READY), NOW, 0)


@pytest.mark.parametrize("state", [State.COMPLETED, State.SCHEDULED, State.READY, State.RESERVED, 0])
def test_a_redrive_of_any_other_state_is_refused(state: int) -> None:
    assert redrive(int(state), NOW) is None


# ---------------------------------------------------------------------- determinism


def test_the_rules_are_deterministic_given_rand() -> None:
    job, p = _job(attempt=2, max_attempts=5), _p(SettleKind.RETRY)
    assert settle(job, p, TABLE, 0.25) == settle(job, p, TABLE, 0.25)
    assert settle(job, p, TABLE, 0.25) != settle(job, p, TABLE, -0.25)


# ---------------------------------------------------------------------- history as read back


def test_attempt_entries_read_the_node_and_an_entry_written_before_it_reads_as_empty() -> None:
    from sepp.domain.records import JobRecord
    old = '{"attempt":1,"worker_id":"w0","started_at":1,"ended_at":2,"outcome":"retry","error_message":"x",' \
          '"error_detail":""}'
    new = history_entry(2, "w1", STARTED, NOW, "retry", "boom", "trace", "node-b")
    rec = JobRecord(JOB, "emails", "t", int(State.COMPLETED), 0, RUN_AT, RUN_AT, 3, 5, b"", "", None, None, LEASE,
                    NOW, "w2", STARTED, f"[{old},{new}]", NOW + S, None, 0, 7, "node-c")
    assert [(e["attempt"], e["node"]) for e in rec.attempt_entries()] == [(1, ""), (2, "node-b"), (3, "node-c")]
    assert rec._replace(node=None).attempt_entries()[-1]["node"] == ""
