"""Descriptor-driven fuzzing of sepp's gRPC API ("A fuzz test in the suite"): a test helper,
not part of the package (it needs hypothesis, a dev dependency).

Shared by ``tests/integration/test_fuzz.py`` (a bounded, derandomized hypothesis run per
service) and ``benchmarks/fuzz.py`` (a timed deep run with concurrent callers). Needs
hypothesis (the ``dev`` extra); nothing in sepp imports it. One module per part, all
re-exported here (``from support import fuzz``; benchmarks put tests/ on the path):

* :func:`rpcs` — every RPC of every service in ``sepp.api.v1``, read from the proto
  descriptors, so a new RPC (or a new service module) is fuzzed without editing this file.
* :class:`Pool` — strings that hit real rows: queue names, job ids, lease ids, idempotency
  keys and page tokens, seeded by :func:`seed` and learned from every answer.
* :class:`Requests` — hypothesis strategies for structurally valid requests built from
  the descriptors with random and extreme values: ints at 0, ±1 and the int32/int64/uint
  extremes, NaN/±inf, Duration/Timestamp seconds at ±2^63 and nanos out of range, strings
  up to 20 KiB with control and unusual Unicode characters, repeated fields and maps up to
  a few thousand entries (bounded in bytes), nested messages, oneofs and enum numbers
  that the enum does not define.
* :func:`judge` — the contract every answer is held to (:data:`ALLOWED_CODES`).
* :func:`check_serving` — the server still serves: health, a default client enqueue
  (which reads ``GetServerInfo`` first), reserve and ack.
"""

from __future__ import annotations

from support.fuzz.calls import Caller, Verdict, judge, show
from support.fuzz.pool import HINTS, Pool
from support.fuzz.rpcs import (
    ALLOWED_CODES,
    CALL_TIMEOUT,
    MAX_MESSAGE_BYTES,
    MAX_TRAILER_BYTES,
    STREAMING,
    Rpc,
    any_rpc,
    rpcs,
    server_errors,
    services,
)
from support.fuzz.seeding import SEED_QUEUES, SERVER_CONFIG, check_serving, peak_rss_kib, seed
from support.fuzz.strategies import Requests

__all__ = [
    "ALLOWED_CODES",
    "CALL_TIMEOUT",
    "HINTS",
    "MAX_MESSAGE_BYTES",
    "MAX_TRAILER_BYTES",
    "SEED_QUEUES",
    "SERVER_CONFIG",
    "STREAMING",
    "Caller",
    "Pool",
    "Requests",
    "Rpc",
    "Verdict",
    "any_rpc",
    "check_serving",
    "judge",
    "peak_rss_kib",
    "rpcs",
    "seed",
    "server_errors",
    "services",
    "show",
]
