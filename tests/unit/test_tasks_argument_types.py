"""A task parameter's plain JSON annotation is a promise on both sides (docs/tasks.md "Arguments
and types"): ``n: int`` gets an ``int``. The producer refuses another type at enqueue
(``TypeError``, before anything is sent); the worker dead-letters a job whose payload (another
language, ``sepp enqueue … --json-payload``) carries one, the reason naming the parameter, the
expected and the actual type. The edges: ``bool`` is no ``int`` (nor ``float``), an ``int`` is
a ``float``, ``None`` fits ``X | None`` only; list items and object values are checked too.

No server: an App pointed at a port nobody listens on (nothing here sends).
"""

from __future__ import annotations

import enum
import re
import uuid
from typing import Annotated, Any, Literal, Optional

import pytest

import sepp
from sepp import DeadLetter
from sepp.tasks import App
from sepp.tasks._argtypes import type_check
from sepp.worker.job import detached_job

NOWHERE = "127.0.0.1:9"
app = App(NOWHERE)


@app.task(name="typed")
def typed(
    n: int,
    ratio: float,
    flag: bool,
    name: str,
    maybe: int | None = None,
    nums: list[int] | None = None,
    tags: dict[str, str] | None = None,
) -> list[Any]:
    return [n, ratio, flag, name, maybe, nums, tags]


@app.task(name="spread")
def spread(*values: float, **flags: bool) -> list[Any]:
    return [list(values), flags]


@app.task(name="loose")
def loose(a: Any, b: object, c: Literal["x", "y"], d: Annotated[int, sepp.Custom], e=None) -> list[Any]:  # type: ignore[no-untyped-def]
    return [a, b, c, d, e]


#: The tasks as untyped values: these tests send what their signatures (and mypy) refuse.
TYPED: Any = typed
SPREAD: Any = spread


class Level(enum.IntEnum):
    HIGH = 2


def run_handler(task: Any, data: bytes) -> Any:
    job = detached_job(str(uuid.uuid4()), task.queue, task.job_type, data, "application/json")
    return task.handler(job)


# ---------------------------------------------------------------- producer side


def test_values_of_the_annotated_types_are_taken_at_their_edges() -> None:
    TYPED.request(1, 2, True, "x")  # an int for ratio: float
    TYPED.request(-(2**100), 2.5, False, "", None, [], {})  # None for X | None; empty containers
    TYPED.request(Level.HIGH, 0.0, True, "x", maybe=3, nums=[1, Level.HIGH], tags={"a": "b"})  # an int subclass
    TYPED.request(1, 1.0, True, "x", nums=(1, 2))  # a tuple for a list
    SPREAD.request(1, 2.5, a=True, b=False)
    loose.request("anything", {"x": [1]}, "z", 5, e=[1])  # nothing to check (Literal neither)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: TYPED.request(True, 1.0, True, "x"), "argument 'n' must be int, not bool"),
        (lambda: TYPED.request(1.0, 1.0, True, "x"), "argument 'n' must be int, not float"),
        (lambda: TYPED.request("1", 1.0, True, "x"), "argument 'n' must be int, not str"),
        (lambda: TYPED.request(1, True, True, "x"), "argument 'ratio' must be float, not bool"),
        (lambda: TYPED.request(1, "1.5", True, "x"), "argument 'ratio' must be float, not str"),
        (lambda: TYPED.request(1, 1.0, 1, "x"), "argument 'flag' must be bool, not int"),
        (lambda: TYPED.request(1, 1.0, True, None), "argument 'name' must be str, not None"),
        (lambda: TYPED.request(n="1", ratio=1.0, flag=True, name="x"), "argument 'n' must be int, not str"),
        (lambda: TYPED.request(1, 1.0, True, "x", maybe="3"), "argument 'maybe' must be int | None, not str"),
        (lambda: TYPED.request(1, 1.0, True, "x", maybe=False), "argument 'maybe' must be int | None, not bool"),
        (lambda: TYPED.request(1, 1.0, True, "x", nums=[1, "2"]), "argument 'nums'[1] must be int, not str"),
        (lambda: TYPED.request(1, 1.0, True, "x", nums={"a": 1}), "argument 'nums' must be list[int] | None, not dict"),
        (lambda: TYPED.request(1, 1.0, True, "x", tags={"a": 1}), "argument 'tags'['a'] must be str, not int"),
        (lambda: SPREAD.request(1.0, "x"), "argument 'values'[1] must be float, not str"),
        (lambda: SPREAD.request(a=1), "argument 'a' must be bool, not int"),
        (lambda: TYPED.s("1"), "argument 'n' must be int, not str"),  # a partial signature too
        (lambda: TYPED.enqueue_many([(1, 1.0, True, "x"), ("1", 1.0, True, "x")]), "argument 'n' must be int"),
    ],
)
def test_a_value_the_annotation_refuses_is_a_type_error_at_enqueue(call: Any, message: str) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        call()


# ---------------------------------------------------------------- worker side


def test_the_worker_passes_values_of_the_annotated_types() -> None:
    assert run_handler(typed, b'{"args":[1,2,true,"x"],"kwargs":{}}') == [1, 2, True, "x", None, None, None]
    sent = b'{"args":[1,2.5,false,"",null,[1],{"a":"b"}]}'
    assert run_handler(typed, sent) == [1, 2.5, False, "", None, [1], {"a": "b"}]
    assert run_handler(typed, b'{"args":[1],"kwargs":{"ratio":0,"flag":true,"name":"x","maybe":7}}')[4] == 7
    assert run_handler(spread, b'{"args":[1,2.5],"kwargs":{"a":true}}') == [[1, 2.5], {"a": True}]
    assert run_handler(loose, b'{"args":[true,null,"x",5]}') == [True, None, "x", 5, None]


@pytest.mark.parametrize(
    ("task", "data", "message"),
    [
        # the positional shape the producer writes (the worker's fast path)
        (typed, b'{"args":["42",1.0,true,"x"],"kwargs":{}}', "typed(): argument 'n' must be int, not str"),
        (typed, b'{"args":[true,1.0,true,"x"],"kwargs":{}}', "argument 'n' must be int, not bool"),
        (typed, b'{"args":[1.5,1.0,true,"x"],"kwargs":{}}', "argument 'n' must be int, not float"),
        (typed, b'{"args":[1,true,true,"x"],"kwargs":{}}', "argument 'ratio' must be float, not bool"),
        (typed, b'{"args":[1,1.0,1,"x"],"kwargs":{}}', "argument 'flag' must be bool, not int"),
        (typed, b'{"args":[1,1.0,true,null],"kwargs":{}}', "argument 'name' must be str, not None"),
        (typed, b'{"args":[1,1.0,true,"x",null,[1,"2"]],"kwargs":{}}', "argument 'nums'[1] must be int, not str"),
        # other shapes another language may send
        (typed, b'{"args":["x",1.0,true,"x"]}', "argument 'n' must be int, not str"),
        (typed, b'{"args":[1],"kwargs":{"ratio":1.0,"flag":"yes","name":"x"}}',
         "argument 'flag' must be bool, not str"),
        (typed, b'{"kwargs":{"n":1,"ratio":1,"flag":true,"name":"x","tags":{"k":null}}}',
         "argument 'tags'['k'] must be str, not None"),
        (typed, b'{"args":[1,1.0,true,"x"],"kwargs":{"maybe":"3"}}', "argument 'maybe' must be int | None, not str"),
        (spread, b'{"args":[1,"x"]}', "argument 'values'[1] must be float, not str"),
        (spread, b'{"args":[],"kwargs":{"a":0}}', "argument 'a' must be bool, not int"),
    ],
)
def test_a_value_the_annotation_refuses_dead_letters_the_job(task: Any, data: bytes, message: str) -> None:
    with pytest.raises(DeadLetter, match=re.escape(message)):
        run_handler(task, data)


def test_what_each_plain_annotation_checks() -> None:
    assert type_check(Any) is None and type_check(object) is None and type_check(Literal[1, 2]) is None
    assert type_check(int | Any) is None  # a union holding Any checks nothing
    check = type_check(Optional[float])  # noqa: UP045 - the spelling under test
    assert check is not None and check.expected == "float | None" and check.types == {float, int, type(None)}
    nested = type_check(Annotated[dict[str, list[int]], "meta"])
    assert nested is not None and nested.expected == "dict[str, list[int]]"
    assert nested.refusal({"a": [1, 2]}, "v") is None
    assert nested.refusal({"a": [1, True]}, "v") == "v['a'][1] must be int, not bool"
