"""The shared validation table (tests/data/validation_cases.json) through the Python client
against a live server configured as the table says: the client's local verdict and the
server's own verdict (``validate_locally=False``) both equal the table's — code, field, limit
and actual. The Rust client runs the same table (clients/rust/tests/validation_table.rs, run
by tests/rust), so the two clients agree with each other and with the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support import validation_cases
from support.servers import module_server

from sepp import Client, ClientOptions, RejectedError, Rejection
from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason="the verdicts do not depend on the storage backend")

LIVE = [c for c in validation_cases.CASES if validation_cases.live(c, "client")]


@pytest.fixture(scope="module")
def table_server(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """A server configured as the table asks (strict, small limits, queues ``enc`` and ``open``)."""
    yield from module_server(tmp_path_factory, backend, **validation_cases.SERVER)


def _key(rejection: Rejection | None) -> validation_cases.Expected:
    if rejection is None:
        return None
    return (rejection.code.reason, rejection.field, rejection.limit, rejection.actual)


@pytest.mark.parametrize("case", LIVE, ids=[c["id"] for c in LIVE])
def test_local_and_server_verdicts_equal_the_table(table_server: ServerProcess, case: dict[str, Any]) -> None:
    request = validation_cases.client_request(case)
    with Client(table_server.grpc_target) as local, \
            Client(table_server.grpc_target, options=ClientOptions(validate_locally=False)) as remote:
        mine = local.validate(request)
        try:
            remote.enqueue(request)
            theirs = None
        except RejectedError as exc:
            theirs = exc.rejection
    assert (_key(mine), _key(theirs)) == (validation_cases.expected(case),) * 2


def test_most_cases_run_live() -> None:
    assert len(LIVE) >= 60, len(LIVE)
