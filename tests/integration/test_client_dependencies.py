"""``EnqueueRequest.with_depends_on`` end to end against a real ``sepp serve`` (docs/workflows.md):
the client's request shape, a dependent job DEFERRED then run after its dependency, and the
catalogue's rejections — the same found locally or by the server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sepp import Client, ClientOptions, EnqueueRequest, RejectedError, RejectionCode
from sepp.client.admin import AdminClient
from sepp.domain.states import State
from sepp.testing import ServerProcess

SERVER_ONLY = ClientOptions(validate_locally=False)
BOTH = pytest.mark.parametrize("options", [ClientOptions(), SERVER_ONLY], ids=["local", "server"])


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.grpc_target) as c:
        yield c


def test_the_request_keeps_distinct_ids_in_order_as_canonical_text() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    req = EnqueueRequest("q", "t").with_depends_on([str(a).upper(), b, str(a)])
    assert req.depends_on == (str(a), str(b))
    assert list(req.to_proto().depends_on) == [str(a), str(b)]
    assert EnqueueRequest("q", "t", depends_on=[a]).depends_on == (str(a),)
    assert EnqueueRequest("q", "t").with_depends_on([]).depends_on == ()
    with pytest.raises(ValueError, match=r"depends_on\[1\]"):
        EnqueueRequest("q", "t").with_depends_on([a, "nope"])
    with pytest.raises(TypeError):
        EnqueueRequest("q", "t").with_depends_on(str(a))  # type: ignore[arg-type]


def test_a_dependent_job_is_deferred_until_its_dependency_completes(client: Client,
                                                                    shared_server: ServerProcess) -> None:
    first = client.enqueue(EnqueueRequest("deps-it", "first"))
    second = client.enqueue(EnqueueRequest("deps-it", "second").with_depends_on([first.job_id]))
    with AdminClient(shared_server.grpc_target) as admin:
        assert int(admin.get_job(second.job_id).state) == State.DEFERRED


@BOTH
def test_an_unknown_dependency_is_dependency_not_found_naming_it(shared_server: ServerProcess,
                                                                 options: ClientOptions) -> None:
    ghost = str(uuid.uuid4())
    with Client(shared_server.grpc_target, options=options) as c:
        with pytest.raises(RejectedError) as info:
            c.enqueue(EnqueueRequest("deps-it", "t").with_depends_on([ghost]))
    assert info.value.code is RejectionCode.DEPENDENCY_NOT_FOUND and ghost in info.value.rejection.message


@BOTH
def test_256_dependencies_pass_and_257_are_too_many(shared_server: ServerProcess, options: ClientOptions) -> None:
    with Client(shared_server.grpc_target, options=options) as c:
        acks = c.enqueue_many([EnqueueRequest("deps-it", "t") for _ in range(257)])
        ids = [a.job_id for a in acks]  # type: ignore[union-attr]
        assert c.enqueue(EnqueueRequest("deps-it", "t").with_depends_on(ids[:256])).job_id
        with pytest.raises(RejectedError) as info:
            c.enqueue(EnqueueRequest("deps-it", "t").with_depends_on(ids))
    rejection = info.value.rejection
    assert (rejection.code, rejection.limit, rejection.actual) == (RejectionCode.DEPENDENCIES_TOO_MANY, 256, 257)


def test_the_failure_policy_is_checked_and_sent() -> None:
    dep = str(uuid.uuid4())
    req = EnqueueRequest("q", "t").with_depends_on([dep])
    assert req.on_dependency_failure == "cancel" and not req.to_proto().on_dependency_failure
    assert req.with_on_dependency_failure("run").to_proto().on_dependency_failure == 2
    assert EnqueueRequest("q", "t", on_dependency_failure="wait").to_proto().on_dependency_failure == 3
    with pytest.raises(ValueError, match="on_dependency_failure"):
        req.with_on_dependency_failure("ignore")


def test_a_cancelled_dependency_cancels_its_dependent_and_a_requeue_revives_it(client: Client,
                                                                              shared_server: ServerProcess) -> None:
    parent = client.enqueue(EnqueueRequest("deps-fail", "first")).job_id
    child = client.enqueue(EnqueueRequest("deps-fail-child", "second").with_depends_on([parent])).job_id
    runs = client.enqueue(EnqueueRequest("deps-fail-child", "third").with_depends_on([parent])
                          .with_on_dependency_failure("run")).job_id
    with AdminClient(shared_server.grpc_target) as admin:
        admin.cancel_job(parent)
        got = admin.get_job(child)
        assert int(got.state) == State.CANCELLED
        assert got.dead_letter_reason == f"DEPENDENCY_FAILED: dependency {parent} was cancelled"
        assert int(admin.get_job(runs).state) == State.READY
        admin.requeue_job(parent, without_dependents=True)
        assert int(admin.get_job(child).state) == State.CANCELLED
        admin.cancel_job(parent)
        admin.requeue_job(parent)
        assert int(admin.get_job(child).state) == State.DEFERRED
