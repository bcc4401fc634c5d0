"""A task step that receives its dependencies' results (docs/tasks.md "Chains pass results"),
without a server: the payload a receiving step carries, the codec finding ``"prepend"`` (and
only on the slow path: a plain call's payload is read as before), the result bound first and
converted like any argument, the build-time check at the limit (one argument missing: fits;
none missing: refused), and a job no server reserved reading no dependencies."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import sepp
from sepp.tasks._args import ArgumentsError
from sepp.tasks._receiving import Receives
from sepp.worker.job import detached_job


class Point(BaseModel):
    x: int
    y: int


app = sepp.App("localhost:1")


@app.task(queue="q", name="add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(queue="q", name="shift")
def shift(p: Point, by: int = 1) -> Point:
    return Point(x=p.x + by, y=p.y + by)


def _data(req: sepp.EnqueueRequest) -> bytes:
    assert req.payload is not None
    return req.payload.data


def test_a_receiving_step_carries_prepend_and_a_plain_one_does_not() -> None:
    assert _data(add.s(1).request_receiving("result")) == b'{"args":[1],"kwargs":{},"prepend":"result"}'
    assert _data(add.s(y=1).request_receiving("results")) == b'{"args":[],"kwargs":{"y":1},"prepend":"results"}'
    assert _data(add.s(1).request()) == b'{"args":[1],"kwargs":{}}'
    assert _data(add.si(1, 2).request_receiving("result")) == b'{"args":[1,2],"kwargs":{}}'  # immutable
    with pytest.raises(ValueError, match="prepend"):
        add.s(1).request_receiving("all")


def test_the_build_check_allows_exactly_one_more_first_argument() -> None:
    add.s(1).request_receiving("result")             # one missing: the result fills it
    add.s(y=2).request_receiving("result")
    with pytest.raises(TypeError, match=r"add\(\): as a workflow step .* too many positional arguments"):
        add.s(1, 2).request_receiving("result")      # none missing
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        add.s(x=1).request_receiving("result")       # the first one named already


def test_the_codec_finds_prepend_and_binds_the_value_first() -> None:
    codec = add._codec
    assert codec.decode(b'{"args":[1,2],"kwargs":{}}') == ([1, 2], {})  # the fast path, untouched
    with pytest.raises(Receives) as got:
        codec.decode(b'{"args":[10],"kwargs":{},"prepend":"result"}')
    assert (got.value.mode, got.value.call_args, got.value.call_kwargs) == ("result", [10], {})
    assert tuple(codec.bind_received(3, got.value.call_args, got.value.call_kwargs)[0]) == (3, 10)
    with pytest.raises(ArgumentsError, match="argument 'x' must be int, not list"):
        codec.bind_received([3, 4], [10], {})
    with pytest.raises(ArgumentsError, match='"prepend" must be "result" or "results"'):
        codec.decode(b'{"args":[10],"prepend":true}')


def test_a_received_value_is_converted_like_any_argument() -> None:
    codec = shift._codec
    with pytest.raises(Receives) as got:
        codec.decode(b'{"args":[],"kwargs":{"by":2},"prepend":"result"}')
    args, kwargs = codec.bind_received({"x": 1, "y": 2}, got.value.call_args, got.value.call_kwargs)
    assert shift.fn(*args, **kwargs) == Point(x=3, y=4)


async def test_a_job_no_server_reserved_depends_on_nothing() -> None:
    job = detached_job("00000000-0000-0000-0000-000000000001", "q", "t", b"", "")
    assert job.dependency_results() == {} and job.dependency_outcomes() == {}
    assert await job.dependency_results_async() == {}
