"""``describe_failure``: one unreachable DSN is worded alike whichever event loop raised the
error (asyncio for ``sepp migrate``, uvloop for ``sepp serve``), and the password stays hidden."""

from __future__ import annotations

import errno

import pytest

from sepp.storage.postgres.schema import describe_failure

DSN = "postgresql://u:s3cret@127.0.0.1:5999/x"


@pytest.mark.parametrize("exc", [
    ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 5999)"),  # asyncio's loop
    ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),  # uvloop
], ids=["asyncio", "uvloop"])
def test_a_refused_connection_reads_the_same_on_either_loop(exc: OSError) -> None:
    assert describe_failure(exc, DSN) == "PostgreSQL at postgresql://u:***@127.0.0.1:5999/x cannot be reached: " \
                                         "Connection refused"


def test_an_os_error_without_errno_keeps_its_own_text() -> None:
    exc = OSError("Multiple exceptions: [Errno 111] Connect call failed ('::1', 5999), …")
    assert describe_failure(exc, DSN).endswith("cannot be reached: Multiple exceptions: [Errno 111] Connect call "
                                               "failed ('::1', 5999), …")
