"""Tasks without a server (docs/tasks.md): arguments bound at enqueue (a wrong name or count is
a ``TypeError`` before anything is sent), the JSON payload and its edge cases (NaN, bytes,
sets, big ints, nested values, non-text keys), pydantic models and dataclasses converted on
both sides, the worker-side handler (a payload it cannot take dead-letters the job), the Job
parameter and ``current_job()``, eager mode (``run_inline``) for sync and async tasks and
both apps, options and signatures as plain data, and ``sepp worker`` loading an App.

An App pointed at a port nobody listens on shows that nothing is sent: binding fails first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import re
import uuid
from decimal import Decimal
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ValidationError

import sepp
from sepp import DeadLetter, Job, JobFailed, Retry
from sepp.tasks import App, AsyncApp, Signature, TaskAck, current_job
from sepp.tasks._args import EMPTY_PAYLOAD, ArgumentsError, is_plain
from sepp.worker.job import detached_job

#: Nothing listens here: a call that reached the network would fail with Unavailable.
NOWHERE = "127.0.0.1:9"


class User(BaseModel):
    id: int
    name: str


@dataclasses.dataclass
class Point:
    x: int
    y: int


app = App(NOWHERE)


@app.task(queue="emails", max_attempts=5, priority=7)
async def send_welcome(user_id: int, locale: str = "en") -> str:
    return f"sent {user_id} {locale}"


@app.task(name="add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="models")
def models(user: User, where: Point, when: dt.datetime, ids: set[int], amount: Decimal) -> User:
    assert isinstance(user, User) and isinstance(where, Point) and isinstance(when, dt.datetime)
    assert isinstance(ids, set) and isinstance(amount, Decimal)
    return User(id=user.id + where.x + len(ids), name=f"{user.name}@{when:%Y}:{amount}")


@app.task(name="anything")
def anything(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@app.task(name="with-job")
def with_job(job: Job, n: int) -> list[Any]:
    return [job.job_type, job.attempt, current_job().id == job.id, n]


def payload(task: Any, *args: Any, **kwargs: Any) -> Any:
    """The JSON payload ``task.enqueue(*args, **kwargs)`` would send, decoded."""
    return json.loads(body(task.request(*args, **kwargs)))


def body(request: sepp.EnqueueRequest) -> bytes:
    """The payload bytes of a task's request."""
    assert request.payload is not None
    return request.payload.data


def run_handler(task: Any, data: bytes) -> Any:
    """The task's Worker handler run on a job holding ``data``, as the Worker runs it."""
    job = detached_job(str(uuid.uuid4()), task.queue, task.job_type, data, "application/json")
    handler = task.handler
    return asyncio.run(handler(job)) if task.is_async else handler(job)


# ---------------------------------------------------------------- definition


def test_a_task_is_its_function_made_a_job_type_with_its_options() -> None:
    assert send_welcome.job_type == "test_tasks.send_welcome"  # module.qualname by default
    assert add.job_type == "add"
    assert send_welcome.queue == "emails" and add.queue == "default"
    request = send_welcome.request(42, locale="de")
    assert (request.queue, request.job_type, request.priority, request.max_attempts) == (
        "emails",
        "test_tasks.send_welcome",
        7,
        5,
    )
    assert request.payload is not None and request.payload.encoding == "application/json"
    assert app.tasks["add"] is add and app.queues == ["emails", "default"]
    assert sepp.App is App and sepp.current_job is current_job


def test_a_job_type_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already defined"):
        app.task(name="add")(lambda x: x)


def test_a_job_parameter_must_come_first() -> None:
    other = App(NOWHERE)
    with pytest.raises(TypeError, match="must be the first positional parameter"):

        @other.task
        def late(n: int, job: Job) -> None: ...


# ---------------------------------------------------------------- binding


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: send_welcome.enqueue(), "missing a required argument: 'user_id'"),  # type: ignore[call-arg]
        (lambda: send_welcome.enqueue(1, "de", "x"), "too many positional arguments"),  # type: ignore[call-arg]
        (lambda: send_welcome.enqueue(1, lang="de"), "unexpected keyword argument 'lang'"),  # type: ignore[call-arg]
        (lambda: send_welcome.enqueue(1, user_id=2), "multiple values for argument 'user_id'"),  # type: ignore[misc]
        (lambda: add.enqueue_many([(1, 2), (3,)]), "missing a required argument: 'y'"),
    ],
)
def test_binding_errors_are_type_errors_before_anything_is_sent(call: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call()


def test_enqueue_many_binds_every_call_first_and_names_the_bad_one() -> None:
    with pytest.raises(TypeError) as caught:
        add.enqueue_many([(1, 2), (3, 4), (5,)])
    assert "in call 2 of enqueue_many" in caught.value.__notes__
    with pytest.raises(TypeError, match="must be a tuple of positional arguments or a signature"):
        add.enqueue_many([[1, 2]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"signature of 'test_tasks.send_welcome', not of 'add'"):
        add.enqueue_many([send_welcome.s(1)])


def test_the_payload_is_args_and_kwargs_as_given() -> None:
    assert payload(send_welcome, 42, locale="de") == {"args": [42], "kwargs": {"locale": "de"}}
    assert payload(send_welcome, user_id=42) == {"args": [], "kwargs": {"user_id": 42}}  # as given
    assert payload(anything, 1, [2, {"a": None}], k=True) == {"args": [1, [2, {"a": None}]], "kwargs": {"k": True}}
    assert body(send_welcome.request(1)) == b'{"args":[1],"kwargs":{}}'  # compact UTF-8
    assert payload(anything, "zß→😀") == {"args": ["zß→😀"], "kwargs": {}}


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (float("nan"), ValueError, "NaN and infinities are not JSON"),
        (float("inf"), ValueError, "NaN and infinities are not JSON"),
        ([1, {"deep": [float("-inf")]}], ValueError, r"argument 'args'\[0\]\[1\]\['deep'\]\[0\] is -inf"),
        (b"raw", TypeError, "is a bytes, which JSON cannot carry"),
        ({1, 2}, TypeError, "is a set, which JSON cannot carry"),
        ({1: "one"}, TypeError, "has the key 1 .int.: JSON object keys are text"),
        (Point(1, 2), TypeError, "is a Point, which JSON cannot carry .annotate the parameter"),
        (object(), TypeError, "is a object, which JSON cannot carry"),
    ],
)
def test_values_json_cannot_carry_are_refused_at_enqueue(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        anything.enqueue(value)


def test_json_edge_values_travel_exactly() -> None:
    big = 2**100
    nested: Any = {"a": [1, 2.5, {"b": [True, None, "x"]}], "e": {}, "l": []}
    sent = payload(anything, big, -big, 0.1, nested, (1, 2), "", 1e308)
    assert sent["args"] == [big, -big, 0.1, nested, [1, 2], "", 1e308]  # a tuple travels as a list
    assert run_handler(anything, body(anything.request(big, nested))) == {"args": [big, nested], "kwargs": {}}


def test_plain_annotations_are_passed_through_and_others_converted() -> None:
    for plain in (int, str, float, bool, None, Any, list[int], dict[str, list[float]], int | None, Annotated[int, "x"]):
        assert is_plain(plain), plain
    for other in (
        User,
        Point,
        dt.datetime,
        uuid.UUID,
        Decimal,
        set[int],
        tuple[int, int],
        dict[int, str],
        list[User],
        User | None,
    ):
        assert not is_plain(other), other


# ---------------------------------------------------------------- pydantic both sides


def test_pydantic_models_and_dataclasses_are_validated_and_converted_on_both_sides() -> None:
    when = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    request = models.request({"id": 1, "name": "ann"}, Point(2, 3), when, {3, 1}, Decimal("1.50"))  # type: ignore[arg-type]
    assert json.loads(body(request))["args"] == [
        {"id": 1, "name": "ann"},
        {"x": 2, "y": 3},
        "2030-01-02T03:04:05Z",
        [1, 3],
        "1.50",
    ]
    # the worker gets the annotated types back; the result is the model as JSON
    assert run_handler(models, body(request)) == {"id": 5, "name": "ann@2030:1.50"}
    with pytest.raises(ValidationError):  # refused at enqueue, by the annotation
        models.enqueue({"id": "not a number", "name": "x"}, Point(1, 1), when, set(), Decimal(1))  # type: ignore[arg-type]


def test_a_payload_the_task_cannot_take_dead_letters_the_job() -> None:
    for data, message in [
        (b"not json", "the payload is not JSON"),
        (b"[1, 2]", 'must be a JSON object {"args": [...], "kwargs": {...}}'),
        (b'{"args": {}, "kwargs": []}', '"args" must be a list'),
        (b'{"args": [1]}', "missing a required argument: 'y'"),
        (b'{"args": [1, 2, 3]}', "too many positional arguments"),
    ]:
        with pytest.raises(DeadLetter, match=re.escape(message)):
            run_handler(add, data)
    bad_model = json.dumps({"args": [{"id": "x", "name": 1}, {"x": 1, "y": 2}, "2030-01-01T00:00:00Z", [], "1"]})
    with pytest.raises(DeadLetter, match="argument 'user'"):
        run_handler(models, bad_model.encode())


def test_the_worker_accepts_the_short_forms_other_languages_may_send() -> None:
    assert run_handler(add, b'{"args": [1], "kwargs": {"y": 2}}') == 3
    assert run_handler(add, b'{"kwargs": {"x": 1, "y": 2}}') == 3
    assert run_handler(anything, b"") == {"args": [], "kwargs": {}}  # no payload: no arguments
    assert run_handler(anything, EMPTY_PAYLOAD) == {"args": [], "kwargs": {}}
    with pytest.raises(DeadLetter, match="missing a required argument"):
        run_handler(add, b"")


def test_the_job_parameter_and_current_job_give_the_job() -> None:
    assert run_handler(with_job, b'{"args": [3]}') == ["with-job", 1, True, 3]
    assert payload(with_job, 3) == {"args": [3], "kwargs": {}}  # the job is not an argument
    with pytest.raises(LookupError, match="only known while a task runs"):
        current_job()


def test_an_async_task_handler_runs_on_the_loop_and_returns_the_result() -> None:
    assert send_welcome.is_async
    assert run_handler(send_welcome, b'{"args": [7], "kwargs": {"locale": "fr"}}') == "sent 7 fr"


# ---------------------------------------------------------------- eager mode


def test_eager_mode_runs_sync_and_async_tasks_here_with_results() -> None:
    with app.run_inline():
        ack = send_welcome.enqueue(42, locale="de")
        assert isinstance(ack, TaskAck) and isinstance(ack, sepp.EnqueueAck)
        assert ack.result() == "sent 42 de" and ack.wait().completed
        assert add.enqueue(2, 3).result() == 5
        acks = add.enqueue_many([(1, 1), add.s(2, y=2)])
        assert [a.result() for a in acks if isinstance(a, TaskAck)] == [2, 4]
        user = models.enqueue(
            User(id=1, name="a"), Point(1, 0), dt.datetime(2031, 1, 1, tzinfo=dt.UTC), {9}, Decimal("2")
        ).result()
        assert user == User(id=3, name="a@2031:2")  # the return annotation converts it back
        assert with_job.enqueue(2).result() == ["with-job", 1, True, 2]
    assert app._inline is None


def test_eager_mode_propagates_a_failure_or_records_it() -> None:
    local = App(NOWHERE)
    calls: list[int] = []

    @local.task(max_attempts=3)
    def flaky(n: int) -> int:
        calls.append(current_job().attempt)
        if len(calls) < n:
            raise Retry("not yet")
        return len(calls)

    @local.task
    def doomed() -> None:
        raise DeadLetter("no")

    with local.run_inline(), pytest.raises(Retry):
        flaky.enqueue(2)
    calls.clear()
    with local.run_inline(propagate=False):
        assert flaky.enqueue(3).result() == 3 and calls == [1, 2, 3]  # retried at once
        calls.clear()
        with pytest.raises(JobFailed, match="ATTEMPTS_EXHAUSTED"):
            flaky.enqueue(9).result()
        outcome = doomed.enqueue().wait()
        assert outcome.dead_lettered and "NACK_DEAD_LETTER" in outcome.reason
    with local.run_inline(), pytest.raises(TypeError):  # binding still comes first
        flaky.enqueue()  # type: ignore[call-arg]


def test_eager_mode_dead_letters_a_result_json_cannot_encode_at_once() -> None:
    """As a worker does: no attempt would return anything else (new-user trial)."""
    local = App(NOWHERE)
    calls: list[int] = []

    @local.task(max_attempts=3)
    def odd() -> object:
        calls.append(current_job().attempt)
        return {"when": object()}

    with local.run_inline(propagate=False):
        outcome = odd.enqueue().wait()
    assert outcome.dead_lettered and calls == [1]
    assert outcome.reason.startswith("NACK_DEAD_LETTER: ResultError: the handler's return value cannot be stored")
    with local.run_inline(), pytest.raises(TypeError, match="not JSON serializable"):  # propagated as it was
        odd.enqueue()


async def test_an_async_app_runs_inline_inside_a_running_loop() -> None:
    aapp = AsyncApp(NOWHERE)

    @aapp.task
    async def twice(x: float) -> float:
        await asyncio.sleep(0)
        return x * 2

    @aapp.task
    def plain(x: int) -> int:
        return x + 1

    with aapp.run_inline():
        ack = await twice.enqueue(1.5)
        assert await ack.result() == 3.0
        assert await (await plain.enqueue(1)).result() == 2
        acks = await plain.enqueue_many([(1,), (2,)])
        assert [await a.result() for a in acks if not isinstance(a, sepp.Rejection)] == [2, 3]
    # a sync App's async task, enqueued inline from a running loop: run in a thread of its own
    with app.run_inline():
        assert send_welcome.enqueue(1).result() == "sent 1 en"


# ---------------------------------------------------------------- options and signatures


def test_options_make_a_copy_with_each_enqueue_setting() -> None:
    when = dt.datetime(2040, 1, 1, tzinfo=dt.UTC)
    opts = send_welcome.options(idempotency_key="welcome-42", priority=2, custom={"tenant": "acme"})
    request = opts.options(scheduled_at=when, custom={"vip": True}).request(42)
    assert (request.idempotency_key, request.priority, request.max_attempts, request.scheduled_at) == (
        "welcome-42",
        2,
        5,
        when,
    )
    assert dict(request.custom) == {"tenant": "acme", "vip": True}
    assert send_welcome.default_options.idempotency_key is None  # the task itself is unchanged
    before = dt.datetime.now(dt.UTC)
    delayed = send_welcome.options(delay=dt.timedelta(hours=1)).request(1).scheduled_at
    assert delayed is not None and before + dt.timedelta(hours=1) <= delayed
    seconds = send_welcome.options(delay=90, queue="other").request(1)
    assert seconds.queue == "other" and seconds.scheduled_at is not None
    with pytest.raises(TypeError, match="timezone-aware"):
        send_welcome.options(scheduled_at=dt.datetime(2040, 1, 1))
    with pytest.raises(TypeError, match="delay must be a timedelta or seconds"):
        send_welcome.options(delay="1h")  # type: ignore[arg-type]


def test_signatures_are_plain_data() -> None:
    sig = send_welcome.options(priority=1).s(locale="de")  # partial: a workflow may add user_id first
    assert isinstance(sig, Signature) and not sig.immutable
    assert sig.to_dict() == {
        "job_type": "test_tasks.send_welcome",
        "queue": "emails",
        "args": [],
        "kwargs": {"locale": "de"},
        "immutable": False,
        "options": {"queue": "emails", "priority": 1, "max_attempts": 5},
    }
    full = send_welcome.si(42)
    assert full.immutable and full.args == (42,) and full.request().job_type == send_welcome.job_type
    assert json.loads(full.payload()) == {"args": [42], "kwargs": {}}
    with pytest.raises(TypeError, match="missing a required argument"):
        send_welcome.si()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword"):
        send_welcome.s(nope=1)
    assert models.s(User(id=1, name="a")).args == ({"id": 1, "name": "a"},)  # converted to JSON values


# ---------------------------------------------------------------- the worker side


def test_app_worker_registers_every_task_in_the_workers_registry() -> None:
    worker = app.worker(concurrency=3)
    assert list(worker.config.queues) == ["emails", "default"]
    assert set(worker.registry) == set(app.tasks) and worker.config.concurrency == 3
    assert worker.registry.get("add") is not None and worker.registry.get("add").fn is add.handler  # type: ignore[union-attr]
    assert worker.registry.get(send_welcome.job_type).is_async  # type: ignore[union-attr]
    assert list(app.worker(queues=["emails"]).config.queues) == ["emails"]


def test_sepp_worker_loads_an_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from sepp.cli.worker_cmd import load_worker

    (tmp_path / "tasks_app_mod.py").write_text(
        "import sepp\napp = sepp.App('127.0.0.1:9')\nempty = sepp.App()\n\n"
        "@app.task(queue='q1')\ndef one(x: int) -> int:\n    return x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    worker = load_worker("tasks_app_mod:app")
    assert list(worker.config.queues) == ["q1"] and "tasks_app_mod.one" in worker.registry
    with pytest.raises(ValueError, match="without tasks"):
        load_worker("tasks_app_mod:empty")
    # A typo lists what the module holds that sepp worker can run (a new user's report).
    with pytest.raises(ValueError) as typo:
        load_worker("tasks_app_mod:ap")
    assert str(typo.value) == ("module 'tasks_app_mod' has no attribute 'ap'; App or Worker objects there: app, "
                               "empty")
    # A file name for the module (another new user's report): the hint, without running the file.
    for spec, hint in [("tasks_app_mod.py:app", "drop the .py: sepp worker tasks_app_mod:app"),
                       ("jobs/tasks_app_mod.py:app", "run from jobs and drop the .py: sepp worker tasks_app_mod:app")]:
        with pytest.raises(ValueError) as file_name:
            load_worker(spec)
        assert str(file_name.value) == f"{spec!r} names a file, sepp worker takes a module: {hint}"


def test_the_target_comes_from_sepp_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEPP_SERVER", "10.1.2.3:7711")
    assert App().target == "10.1.2.3:7711" and App("h:1").target == "h:1"
    monkeypatch.delenv("SEPP_SERVER")
    assert App().target == "127.0.0.1:7700"
    with sepp.Client("127.0.0.1:7799") as client:
        assert App(client=client).client is client and App(client=client).target == "127.0.0.1:7799"


def test_arguments_error_is_a_value_error() -> None:
    assert issubclass(ArgumentsError, ValueError)


def test_parameters_marked_custom_also_travel_in_the_custom_map() -> None:
    local = App(NOWHERE)

    @local.task(name="tenant-job")
    def tenant_job(tenant: Annotated[str, sepp.Custom], n: int, vip: Annotated[bool, sepp.Custom] = False) -> int:
        return n

    request = tenant_job.options(custom={"source": "api"}).request("acme", 3)
    assert dict(request.custom) == {"source": "api", "tenant": "acme", "vip": False}
    assert json.loads(body(request)) == {"args": ["acme", 3], "kwargs": {}}  # still an argument
    assert dict(tenant_job.request(n=1, tenant="b", vip=True).custom) == {"tenant": "b", "vip": True}
    (many,) = tenant_job._many_requests([("c", 1)])
    assert dict(many.custom) == {"tenant": "c", "vip": False}
    with pytest.raises(TypeError):  # a custom-map value must be str, int, float or bool
        tenant_job.request(["not", "a", "scalar"], 1)  # type: ignore[arg-type]
    with local.run_inline():
        assert tenant_job.enqueue("d", 5).result() == 5
