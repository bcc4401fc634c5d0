"""Messages a first-time user meets: a dead-letter reason that quotes the last error says it
once in ``JobFailed``; a task given as a workflow node where a call of it belongs says to use
``task.s(...)``; ``Task.name`` is its job type (the decorator's ``name=``)."""

from __future__ import annotations

import pytest

from sepp import App, EnqueueRequest, JobFailed, chain, group
from sepp.request.outcomes import JobOutcome


def _dead(reason: str, last_error: str) -> JobOutcome:
    return JobOutcome(job_id="j1", state="DEAD_LETTERED", result=None, last_error=last_error, attempt=1,
                      attempts=(), finished_at=None, queue="q", job_type="t", reason=reason)


def test_a_reason_quoting_the_error_says_it_once() -> None:
    error = "mytasks.add(): argument 'x' must be int, not str"
    text = str(JobFailed(_dead(f"NACK_DEAD_LETTER: {error}", error)))
    assert text.count(error) == 1, text
    other = str(JobFailed(_dead("ATTEMPTS_EXHAUSTED", "boom")))
    assert "ATTEMPTS_EXHAUSTED" in other and other.endswith(": boom")


def test_a_task_itself_as_a_node_says_to_call_s() -> None:
    app = App()

    @app.task(name="maths.add")
    def add(x: int, y: int) -> int:
        return x + y

    assert add.name == "maths.add" == add.job_type
    said = r"not the task 'maths.add' itself: add add\.s\(\.\.\.\) or add\.si"
    with pytest.raises(TypeError, match=said):
        group([add])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=said):
        chain(EnqueueRequest("q", "a"), add)  # type: ignore[arg-type]


def test_an_unknown_keyword_is_named_before_a_missing_argument() -> None:
    app = App()

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    with pytest.raises(TypeError, match="got an unexpected keyword argument 'z'"):
        add.request(2, z=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        add.request(2)  # type: ignore[call-arg]
