"""The shortcuts of a task's commonest call (docs/tasks.md "The payload"): positional arguments
of a simple signature written without binding's intermediate objects, ``enqueue_many``'s
requests built as the client reads them, ``request_maker``'s requests filled in without a
constructor call, and the worker parsing only the argument list of such a payload. Each
must give exactly what the whole way gives, and leave every other call to it.

No server: an App pointed at a port nobody listens on (nothing here sends).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import uuid
from typing import Any

import pytest

from sepp import DeadLetter, EnqueueRequest, Payload
from sepp.request import request_maker
from sepp.tasks import App, Signature, TaskOptions
from sepp.tasks._args import EMPTY_PAYLOAD
from sepp.worker.job import detached_job

NOWHERE = "127.0.0.1:9"
app = App(NOWHERE)


@app.task(name="add")
def add(x: int, y: int = 0) -> int:
    return x + y


@app.task(name="pair")
def pair(x: Any, y: Any = 0) -> list[Any]:
    return [x, y]


@app.task(name="nothing")
def nothing() -> str:
    return "done"


@app.task(name="keyword")
def keyword(x: int, *, y: int) -> int:
    return x * y


class Level(enum.IntEnum):
    HIGH = 2


def reference(args: list[Any], kwargs: dict[str, Any]) -> bytes:
    """The payload as the docs define it: compact UTF-8 JSON, NaN refused."""
    text = json.dumps({"args": args, "kwargs": kwargs}, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")


def run_handler(task: Any, data: bytes) -> Any:
    job = detached_job(str(uuid.uuid4()), task.queue, task.job_type, data, "application/json")
    return task.handler(job)


# ---------------------------------------------------------------- producer side


@pytest.mark.parametrize(
    "args",
    [
        (1,),
        (1, 2),  # the most the signature takes
        (-(2**100), True),
        (None, False),
        ("zß→😀", 'quote " back \\ tab \t nl \n nul \x00'),
        (0.1, -0.0),
        (1e308, 5e-324),
    ],
)
def test_positional_calls_are_written_as_binding_writes_them(args: tuple[Any, ...]) -> None:
    codec = pair._codec
    assert codec.fits_positional(args)
    assert codec.encode(args, {}) == reference(list(args), {})
    assert pair.request(*args).payload == Payload(reference(list(args), {}), "application/json")


def test_values_their_annotation_takes_are_written_the_short_way() -> None:
    assert add._codec.fits_positional((1, 2))
    assert add.request(1, 2).payload == Payload(reference([1, 2], {}), "application/json")


def test_a_call_without_arguments_is_the_empty_payload() -> None:
    assert nothing._codec.fits_positional(())
    assert nothing._codec.encode((), {}) == EMPTY_PAYLOAD


@pytest.mark.parametrize(
    ("task", "args"),
    [
        (add, ()),  # one fewer than the least
        (add, (1, 2, 3)),  # one past the most
        (keyword, (1,)),  # a required keyword-only parameter
        (pair, (float("nan"),)),
        (pair, (float("inf"),)),
        (pair, (-float("inf"),)),
        (pair, ("lone \ud800",)),
        (add, (Level.HIGH,)),  # an int subclass: check_json's business
        (pair, ([1, 2],)),  # not a scalar
        (pair, ({"a": 1},)),
        (pair, (b"raw",)),
        (add, ("1",)),  # a str for x: int (bind refuses it)
        (add, (1, True)),  # a bool for y: int
        (add, (1.0,)),  # a float for x: int
    ],
)
def test_everything_else_goes_the_whole_way(task: Any, args: tuple[Any, ...]) -> None:
    assert not task._codec.fits_positional(args)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((), TypeError, "missing a required argument: 'x'"),
        ((1, 2, 3), TypeError, "too many positional arguments"),
        ((float("nan"),), ValueError, "NaN and infinities are not JSON"),
        (("lone \ud800",), UnicodeEncodeError, "surrogates not allowed"),
        (("1",), TypeError, re.escape("add(): argument 'x' must be int, not str")),
    ],
)
def test_what_does_not_fit_raises_as_before(args: tuple[Any, ...], error: type[Exception], message: str) -> None:
    task = add if error is TypeError else pair
    with pytest.raises(error, match=message):
        task.request(*args)
    with pytest.raises(error, match=message) as caught:
        task.enqueue_many([(1, 2), args])
    assert "in call 1 of enqueue_many" in caught.value.__notes__


def test_values_the_shortcut_leaves_out_still_travel() -> None:
    assert json.loads(add.request(Level.HIGH).payload.data) == {"args": [2], "kwargs": {}}  # type: ignore[union-attr]
    assert json.loads(pair.request([1, 2]).payload.data) == {"args": [[1, 2]], "kwargs": {}}  # type: ignore[union-attr]


def test_enqueue_many_requests_are_the_requests_of_each_call_in_order() -> None:
    signature = add.s(3, y=4)
    calls: list[tuple[Any, ...] | Signature] = [(1, 2), signature, (5,), (Level.HIGH,), (7, 8)]
    requests = add._many_requests(calls)
    assert len(requests) == 5  # sized: the client's progress knows the total
    expected = [add.request(1, 2), signature.request(), add.request(5), add.request(Level.HIGH), add.request(7, 8)]
    assert list(requests) == expected
    assert list(requests) == expected  # read again: the same
    assert all(type(r) is EnqueueRequest for r in requests)
    assert len(add._many_requests([])) == 0


def test_enqueue_many_with_options_builds_requests_as_enqueue_does() -> None:
    urgent = add.options(priority=9, custom={"team": "a"})
    requests = list(urgent._many_requests([(1, 2), (3,)]))
    assert requests == [urgent.request(1, 2), urgent.request(3)]
    assert [(r.priority, dict(r.custom)) for r in requests] == [(9, {"team": "a"})] * 2


def test_a_bad_queue_is_refused_before_anything_is_sent_naming_the_call() -> None:
    bad = add.options(queue="lone \ud800")
    with pytest.raises(ValueError, match="not valid UTF-8") as caught:
        bad.enqueue_many([(1, 2)])
    assert "in call 0 of enqueue_many" in caught.value.__notes__
    assert len(bad._many_requests([])) == 0  # no call: nothing to refuse


def test_request_maker_makes_what_the_constructor_makes() -> None:
    make = request_maker("q", "job", "application/json")
    made = make(b'{"a":1}')
    built = EnqueueRequest("q", "job", payload=Payload(b'{"a":1}', "application/json"))
    assert type(made) is EnqueueRequest and type(made.payload) is Payload
    assert made == built and repr(made) == repr(built)
    assert made.to_proto() == built.to_proto()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.queue = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.payload.data = b""  # type: ignore[misc, union-attr]
    assert make(b"x") is not make(b"x")


@pytest.mark.parametrize(
    ("queue", "job_type", "encoding", "error"),
    [
        (1, "job", "json", TypeError),
        ("q", None, "json", TypeError),
        ("q", "job", b"json", TypeError),
        ("lone \ud800", "job", "json", ValueError),
    ],
)
def test_request_maker_checks_the_names_once_up_front(queue: Any, job_type: Any, encoding: Any, error: type) -> None:
    with pytest.raises(error):
        request_maker(queue, job_type, encoding)


def test_task_options_say_when_requests_are_bare() -> None:
    assert TaskOptions("q").bare
    for changed in ({"priority": 1}, {"max_attempts": 2}, {"idempotency_key": "k"}, {"delay": 5}, {"custom": {"a": 1}}):
        assert not TaskOptions("q").merged(**changed).bare, changed
    delayed = TaskOptions("q").merged(delay=60).request_maker("job")(b"{}")
    assert delayed.scheduled_at is not None  # the delay counts from each request


# ---------------------------------------------------------------- worker side


def test_the_worker_reads_the_positional_shape_as_the_whole_parse_does() -> None:
    assert run_handler(add, b'{"args":[1,2],"kwargs":{}}') == 3
    assert run_handler(add, b'{"args":[ 1 , 2 ],"kwargs":{}}') == 3  # blanks inside the list
    assert run_handler(add, b'{"args":[1],"kwargs":{}}') == 1  # the least
    assert run_handler(nothing, EMPTY_PAYLOAD) == "done"
    assert run_handler(add, b'{"args":[1],"x":[2],"kwargs":{}}') == 1  # another key: the whole parse
    assert run_handler(keyword, b'{"args":[2],"kwargs":{}}'.replace(b"{}}", b'{"y":3}}')) == 6
    assert add._codec.decode(b'{"args":[1,2],"kwargs":{}}') == ([1, 2], {})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"args":[1,2,3],"kwargs":{}}', "too many positional arguments"),  # one past the most
        (b'{"args":[],"kwargs":{}}', "missing a required argument: 'x'"),  # one fewer than the least
        (b'{"args":[1,2]],"kwargs":{}}', "the payload is not JSON"),
        (b'{"args":[1,\xff],"kwargs":{}}', "the payload is not JSON"),  # not UTF-8
        (b'{"args":[1,,"kwargs":{}}', "the payload is not JSON"),
    ],
)
def test_a_positional_shape_the_task_cannot_take_dead_letters_as_before(data: bytes, message: str) -> None:
    with pytest.raises(DeadLetter, match=re.escape(message)):
        run_handler(add, data)


def test_keyword_only_tasks_are_not_read_positionally() -> None:
    with pytest.raises(DeadLetter, match="missing a required argument: 'y'"):
        run_handler(keyword, b'{"args":[2],"kwargs":{}}')
