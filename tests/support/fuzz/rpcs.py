"""The RPCs a fuzzer calls and the contract their answers are held to: every unary RPC
of every service in ``sepp.api.v1``, read from the proto descriptors (``rpcs``), and the
status codes a sepp answer may carry (``ALLOWED_CODES``)."""

from __future__ import annotations

import importlib
import pkgutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor, message
from hypothesis import strategies as st

import sepp.api.v1

Message = message.Message
Code = grpc.StatusCode


#: Every status code a sepp answer may carry, and where it comes from. Read off
#: ``sepp/server/rpc/status.py``, ``rpc/admin.py``, ``rpc/registration.py`` and docs/errors.md.
#: The values say whether a non-OK answer must carry a ``google.rpc.Status`` with an
#: ``ErrorInfo`` (domain ``sepp``) in ``grpc-status-details-bin``.
ALLOWED_CODES: dict[Any, bool] = {  # grpc.StatusCode → needs an ErrorInfo (grpc ships no stubs)
    Code.OK: False,
    # Catalogue rejections, InvalidRequest (bad batch / reserve / settle / admin
    # arguments, malformed page tokens and ids), undecodable requests (registration.py).
    Code.INVALID_ARGUMENT: True,
    # UNKNOWN_QUEUE (strict mode), JOB_NOT_FOUND, QUEUE_NOT_FOUND, IDEMPOTENCY_KEY_NOT_FOUND.
    Code.NOT_FOUND: True,
    # LEASE_MISMATCH, LEASE_EXPIRED; JOB_STATE, QUEUE_NOT_EMPTY (admin).
    Code.FAILED_PRECONDITION: True,
    # Not sent by the server today; the admin client maps it, so it stays allowed.
    Code.ALREADY_EXISTS: True,
    # Load shedding: ErrorInfo OVERLOADED + RetryInfo.
    Code.RESOURCE_EXHAUSTED: True,
    # SHUTTING_DOWN, STORE_UNAVAILABLE (status.py).
    Code.UNAVAILABLE: True,
    # Not sent today; allowed for optimistic-concurrency refusals should one be added.
    Code.ABORTED: True,
    # The caller's own deadline: gRPC makes this status on the client, with no details.
    Code.DEADLINE_EXCEEDED: False,
}
# Never allowed: UNKNOWN (an exception escaped a handler), INTERNAL (the
# internal-error interceptor's answer to one: each case must be fixed at its cause), UNAUTHENTICATED (the
# fuzzed server has no admin token), UNIMPLEMENTED, CANCELLED, DATA_LOSS, OUT_OF_RANGE, …

#: Largest trailing metadata an answer may carry, bytes: gRPC's default
#: ``grpc.max_metadata_size`` (8 KiB), above which a client may drop the answer as
#: RESOURCE_EXHAUSTED "received metadata size exceeds …".
MAX_TRAILER_BYTES = 8 * 1024

#: Longest client deadline the fuzzer gives a call, seconds (generous: the machine is shared).
CALL_TIMEOUT = 20.0

#: The server's ``max_message_bytes`` default (limits.py): a request larger than this is
#: refused by gRPC itself with RESOURCE_EXHAUSTED and no details.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Rpc:
    """One unary RPC: ``service`` is the short service name, ``path`` the gRPC method path."""

    service: str
    name: str
    path: str
    input: descriptor.Descriptor
    output: descriptor.Descriptor

    @property
    def label(self) -> str:
        """``Service.Method``."""
        return f"{self.service}.{self.name}"


#: The streaming RPCs the fuzzer does not call: WatchJobs (server-streaming: a well-formed
#: call streams until it is ended) has its filters tested at their limits and one past them in
#: tests/integration/test_watch_jobs.py; EnqueueWorkflowParts (client-streaming) has its bounds,
#: a key mismatch and an undecodable part tested in tests/integration/test_client_workflow_parts.py.
STREAMING = frozenset({"sepp.api.v1.ProducerService.WatchJobs", "sepp.api.v1.ProducerService.EnqueueWorkflowParts"})


def rpcs() -> list[Rpc]:
    """Every unary RPC of every service declared in the ``sepp.api.v1`` proto modules, in
    declaration order (``STREAMING`` lists the streaming ones it leaves out: their bad
    input is tested by their own tests). Raises ``ValueError`` for any other streaming RPC."""
    found: list[Rpc] = []
    for info in sorted(pkgutil.iter_modules(sepp.api.v1.__path__), key=lambda m: m.name):
        if not info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(f"sepp.api.v1.{info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                if method.full_name in STREAMING:
                    continue
                if method.client_streaming or method.server_streaming:
                    raise ValueError(f"{method.full_name} is streaming; the fuzzer only calls unary RPCs")
                found.append(Rpc(service.name, method.name, f"/{service.full_name}/{method.name}",
                                 method.input_type, method.output_type))
    return found


def services() -> dict[str, list[Rpc]]:
    """:func:`rpcs` grouped by service short name."""
    out: dict[str, list[Rpc]] = {}
    for rpc in rpcs():
        out.setdefault(rpc.service, []).append(rpc)
    return out


def any_rpc() -> st.SearchStrategy[Rpc]:
    """Any RPC, a service first (so each service gets a fair share, not each RPC: the admin
    service's sixteen would otherwise drown the workers' six and delete their rows)."""
    by_service = services()
    return st.sampled_from(sorted(by_service)).flatmap(lambda name: st.sampled_from(by_service[name]))


def server_errors(lines: Sequence[str]) -> Counter[str]:
    """The ERROR and CRITICAL lines of a server's log (``sepp serve`` output), by shape
    (digits folded, 160 characters): a sweep pass that failed, a handler that raised."""
    found: Counter[str] = Counter()
    for line in lines:
        parts = line.split(" ", 3)  # "<date> <time> <LEVEL> <logger>: <message>"
        level, rest = (parts[2], parts[3]) if len(parts) == 4 and line[:1].isdigit() else ("", "")
        if level in ("ERROR", "CRITICAL"):
            found["".join("#" if c.isdigit() else c for c in f"{level} {rest}")[:160]] += 1
    return found

