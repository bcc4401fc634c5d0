"""Descriptor-driven fuzzing of sepp's gRPC API ("A fuzz test in the suite").

Shared by ``tests/integration/test_fuzz.py`` (a bounded, derandomized hypothesis run per
service) and ``benchmarks/fuzz.py`` (a timed deep run with concurrent callers). Needs
hypothesis (the ``dev`` extra); nothing else in sepp imports this module.

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

import importlib
import pkgutil
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import grpc
from google.protobuf import descriptor, duration_pb2, field_mask_pb2, message, message_factory, text_format
from google.protobuf.descriptor import FieldDescriptor
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import strategies as st

import sepp.api.v1
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.limits import QueueSettings
from sepp.rejections import ERROR_DOMAIN
from sepp.server.rpc.producer import queue_settings_proto
from sepp.wire import STATUS_DETAILS_KEY

Message = message.Message
Code = grpc.StatusCode

# ---------------------------------------------------------------------- the contract

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


def rpcs() -> list[Rpc]:
    """Every RPC of every service declared in the ``sepp.api.v1`` proto modules, in
    declaration order. Raises ``ValueError`` for a streaming RPC (sepp has none)."""
    found: list[Rpc] = []
    for info in sorted(pkgutil.iter_modules(sepp.api.v1.__path__), key=lambda m: m.name):
        if not info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(f"sepp.api.v1.{info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
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


# ---------------------------------------------------------------------- the pool of real values

#: Pool kinds and the string fields (by name) that draw from them most of the time.
HINTS: dict[str, str] = {
    "queue": "queue", "queues": "queue", "name": "queue",
    "job_id": "job_id", "id": "job_id", "lease_id": "lease_id",
    "key": "key", "idempotency_key": "key", "job_type": "job_type",
    "page_token": "token", "next_page_token": "token",
    "reason_prefix": "reason", "dead_letter": "reason", "reason": "reason",
    "encoding": "encoding", "allowed_encodings": "encoding",
}

_POOL_SIZE = 64


class Pool:
    """Strings that hit real rows, by kind (``queue``, ``job_id``, ``lease_id``, ``key``,
    ``job_type``, ``token``, ``reason``, ``encoding``). Bounded (the last 64 per kind);
    thread-safe. ``pick(kind, i)`` is ``i`` modulo the kind's size, so hypothesis draws an
    index (deterministic) and the value follows the server's current rows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        kinds = set(HINTS.values())
        self._values: dict[str, deque[str]] = {kind: deque(maxlen=_POOL_SIZE) for kind in kinds}
        self._sticky: dict[str, deque[str]] = {kind: deque(maxlen=_POOL_SIZE) for kind in kinds}
        self._pairs: deque[tuple[str, str]] = deque(maxlen=_POOL_SIZE)
        self._corpus: dict[str, deque[bytes]] = {}
        self.add("reason", "NACK_DEAD_LETTER", "ATTEMPTS_EXHAUSTED", "LEASE_EXPIRED", "NACK", sticky=True)
        self.add("encoding", "application/json", "text/plain", sticky=True)
        self.add("job_type", "email", "report", sticky=True)

    def add(self, kind: str, *values: str, sticky: bool = False) -> None:
        """Remember ``values`` (empty strings are ignored). Sticky values (the seeded rows)
        are kept apart and are never pushed out by learned ones."""
        with self._lock:
            bucket = (self._sticky if sticky else self._values)[kind]
            for value in values:
                if value and value not in bucket:
                    bucket.append(value)

    def pick(self, kind: str, index: int) -> str:
        """A sticky value for even ``index``, a learned one for odd (``index // 2`` modulo their
        number; the other bucket when one is empty); ``""`` when the kind has none."""
        with self._lock:
            first, other = self._sticky[kind], self._values[kind]
            if index % 2:
                first, other = other, first
            bucket = first or other
            return bucket[(index // 2) % len(bucket)] if bucket else ""

    def pair(self, index: int) -> tuple[str, str]:
        """A (job id, lease id) pair of one of the last 16 Reservations seen (``index`` modulo)."""
        with self._lock:
            recent = min(len(self._pairs), 16)  # the newest are the most likely to be current still
            return self._pairs[-1 - index % recent] if recent else ("", "")

    def any(self, index: int) -> str:
        """A value of any kind (index picks the kind, then the value)."""
        kinds = sorted(self._values)
        return self.pick(kinds[index % len(kinds)], index // len(kinds))

    def keep(self, rpc: Rpc, request: Message) -> None:
        """Remember a request the server answered OK (at most 64 KiB; the last 32 per RPC):
        :meth:`Requests.mutant` changes one field of one."""
        data = request.SerializeToString()
        if len(data) <= 64 * 1024:
            with self._lock:
                self._corpus.setdefault(rpc.path, deque(maxlen=32)).append(data)

    def kept(self, rpc: Rpc, index: int) -> Message:
        """A copy of a kept request of ``rpc`` (``index`` modulo their number); empty when none."""
        cls = message_factory.GetMessageClass(rpc.input)
        with self._lock:
            bucket = self._corpus.get(rpc.path)
            data = bucket[index % len(bucket)] if bucket else b""
        return cls.FromString(data)

    def learn(self, answer: Message, depth: int = 0) -> None:
        """Remember the ids, lease ids, page tokens and names an answer carries."""
        if depth > 4:
            return
        fields = answer.DESCRIPTOR.fields_by_name
        if "lease_id" in fields and "job" in fields:  # a Reservation: a lease that is current
            reservation = cast(Any, answer)
            job_id, lease_id = reservation.job.id, reservation.lease_id
            if job_id and lease_id:
                with self._lock:
                    self._pairs.append((job_id, lease_id))
        for field, value in answer.ListFields():
            if field.message_type is not None:
                if field.message_type.GetOptions().map_entry:
                    continue
                for item in (value if field.is_repeated else [value]):
                    self.learn(item, depth + 1)
            elif field.type == FieldDescriptor.TYPE_STRING and field.name in HINTS and not field.is_repeated:
                self.add(HINTS[field.name], value)


# ---------------------------------------------------------------------- value strategies

I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)
_INT_EDGES = [0, 1, -1, 2, 9, 10, 30, 255, 256, 257, 1000, 1001, 86_400, 86_401, 2**31 - 1, -(2**31)]
_I64_EDGES = [2**32, 2**53, 9_223_372_036_854, 10**13, 315_576_000_000, 315_576_000_001, 2**62, -(2**62),
              2**63 - 1, -(2**63)]
_FLOAT_EDGES = [0.0, -0.0, 0.2, 1.0, -1.0, 1.0000001, 1e308, -1e308, 5e-324, float("nan"), float("inf"),
                float("-inf")]
#: Strings that have broken parsers elsewhere: controls, separators, bidi, BOM, noncharacters,
#: combining marks, astral planes, format strings, path and SQL fragments.
_EDGE_STRINGS = ["", " ", "a", "\x00", "\t", "\n", "\r\n", "\x1b[31m", "\x7f", "\x85", "\xa0", "\u200b",
                 "\u2028", "\u202e", "\ufeff", "\ufffd", "\uffff", "\U0001f4a5", "\U0010ffff", "é", "e\u0301",
                 "日本語", "../../etc/passwd", "' OR 1=1 --", "%s%n%x", "{0}", "<script>", "null", "NaN", "-1",
                 "0", ":", ".", "-", "a:b.c-d_e", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
#: Long-string lengths, UTF-8 bytes (around the 128/256/512-byte limits and up to 20 KiB).
_LONG_BYTES = [127, 128, 129, 255, 256, 257, 511, 512, 513, 1024, 1025, 4096, 8193, 16_385, 20_480]
#: Big bytes lengths: around the 1 MiB payload default.
_BIG_BYTES = [1024, 65_536, 1024 * 1024, 1024 * 1024 + 1]
#: Entry counts of big repeated fields and maps (around 8, 32, 256 and 1,000 limits).
_BIG_COUNTS = [8, 9, 32, 33, 255, 256, 257, 1000, 1001, 4096]
#: Seconds of Durations and Timestamps: zero, ±1, around the int64 overflows of ns, µs and ms
#: (~9.2e9, ~9.2e12, ~9.2e15 s) and of a float round trip (2^63 − 1024),
#: protobuf's valid ranges (±315,576,000,000 s; years 1–9999) and the int64 extremes.
_SECONDS_EDGES = [0, 1, -1, 30, 31, 3600, 86_400, 86_401, 31_536_000, 31_536_001, 315_360_000, 2**31 - 1,
                  253_402_300_799, 253_402_300_800, -62_135_596_800, -62_135_596_801, 315_576_000_000,
                  315_576_000_001, 9_223_372_036, 9_223_372_036_855, 9_223_372_036_854_776, 10**13, 2**62, -(2**62),
                  2**63 - 1024, 2**63 - 1, -(2**63)]
_TIME_TYPES = ("google.protobuf.Timestamp", "google.protobuf.Duration")
_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_NANOS_EDGES = [0, 1, -1, 999, 1000, 999_999, 1_000_000, 999_999_999, 1_000_000_000, -999_999_999, 2**31 - 1,
                -(2**31)]


def _stretch(base: str, size: int) -> str:
    """``base`` repeated to ``size`` UTF-8 bytes (cut at a character boundary)."""
    base = base or "x"
    raw = (base * (size // max(1, len(base.encode())) + 1)).encode()[:size]
    return raw.decode("utf-8", "ignore")


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each ``weight`` times as likely (``st.one_of`` merges equal
    branches, so repeating one does not weigh it)."""
    slots = [i for i, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.sampled_from(slots).flatmap(lambda i: choices[i][1])


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [v for v in (*_INT_EDGES, *_I64_EDGES) if lo <= v <= hi]
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


_INT_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: I32, FieldDescriptor.CPPTYPE_INT64: I64,
    FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}


def _replicate(budget: int) -> Callable[[tuple[Any, int]], list[Any]]:
    """``(item, n)`` → ``n`` copies of ``item``, fewer when they would exceed ``budget`` bytes."""
    def make(drawn: tuple[Any, int]) -> list[Any]:
        item, n = drawn
        size = item.ByteSize() if isinstance(item, Message) else len(item) if isinstance(item, str | bytes) else 8
        return [item] * max(1, min(n, budget // max(1, size)))
    return make


class Requests:
    """Hypothesis strategies for the requests of :func:`rpcs`, drawing real values from ``pool``.

    ``budget`` bounds each big repeated field or map, bytes (the request stays far below the
    server's 16 MiB message cap). Strategies are built once per message type and cached,
    and so are the value strategies of each field (``value``, ``tame_value``: the message
    strategies draw them inside ``@st.composite`` bodies, so built anew each draw they were
    validated anew each draw — most of a fuzz run's time). A strategy holds no state, and
    what it draws depends only on the choices and on the pool at draw time, so the cached
    ones draw exactly what fresh ones would.
    """

    def __init__(self, pool: Pool, budget: int = 2 * 1024 * 1024) -> None:
        self.pool = pool
        self.budget = budget
        self._cache: dict[str, st.SearchStrategy[Message]] = {}
        self._values: dict[tuple[str, str, str, int], st.SearchStrategy[Any]] = {}

    # ------------------------------------------------------------------ leaves

    def pooled(self, kind: str | None) -> st.SearchStrategy[str]:
        """A pool value of ``kind`` (any kind when ``None``)."""
        index = st.integers(0, 2**16)
        if kind is None:
            return index.map(self.pool.any)
        return index.map(lambda i: self.pool.pick(kind, i))

    def text(self, kind: str | None = None) -> st.SearchStrategy[str]:
        """Any valid string: pool values (twice as likely for a hinted field), edge strings,
        random Unicode (no surrogates), pool values with an edge suffix, long strings."""
        short = st.text(st.characters(codec="utf-8"), max_size=24)
        base = st.one_of(st.sampled_from(_EDGE_STRINGS), short, self.pooled(kind))
        return weighted((2 if kind else 1, self.pooled(kind)), (1, self.pooled(None)),
                        (1, st.sampled_from(_EDGE_STRINGS)), (1, short),
                        (1, st.tuples(self.pooled(kind), st.sampled_from(_EDGE_STRINGS)).map("".join)),
                        (1, st.tuples(base, st.sampled_from(_LONG_BYTES)).map(lambda d: _stretch(*d))))

    def blob(self) -> st.SearchStrategy[bytes]:
        """Bytes: empty, short random, or big (around 1 MiB)."""
        big = st.tuples(st.binary(min_size=1, max_size=8), st.sampled_from(_BIG_BYTES)).map(
            lambda d: (d[0] * (d[1] // len(d[0]) + 1))[:d[1]])
        return st.one_of(st.just(b""), st.binary(max_size=64), big)

    def scalar(self, field: FieldDescriptor) -> st.SearchStrategy[Any]:
        """A value for a non-message field."""
        cpp = field.cpp_type
        if cpp in _INT_RANGES:
            return _ints(*_INT_RANGES[cpp])
        if cpp in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
            width: Literal[32, 64] = 64 if cpp == FieldDescriptor.CPPTYPE_DOUBLE else 32
            return st.one_of(st.sampled_from(_FLOAT_EDGES), st.floats(width=width))
        if cpp == FieldDescriptor.CPPTYPE_BOOL:
            return st.booleans()
        if cpp == FieldDescriptor.CPPTYPE_ENUM:
            enum = _enum(field)
            known = [v.number for v in enum.values]
            if enum.is_closed:
                return st.sampled_from(known)
            return st.one_of(st.sampled_from(known), _ints(*I32))  # open enum: unknown numbers too
        if field.type == FieldDescriptor.TYPE_BYTES:
            return self.blob()
        return self.text(HINTS.get(field.name))

    def _seconds_nanos(self, relative: bool) -> st.SearchStrategy[tuple[int, int]]:
        # Hypothesis draws wide integers mostly small, so the edges and a uniform magnitude
        # (10^k, k ≤ 18, with a sign) carry the extremes.
        magnitude = st.tuples(st.integers(0, 18), st.sampled_from([1, -1])).map(lambda d: d[1] * 10 ** d[0])
        choices = [(3, st.sampled_from(_SECONDS_EDGES)), (1, magnitude), (1, _ints(*I64)), (1, st.integers(0, 120))]
        if relative:  # around now: just past, just ahead, a year ahead (the schedule horizon)
            choices.append((1, st.integers(-10**6, 40_000_000).map(lambda d: int(time.time()) + d)))
        seconds = weighted(*choices)
        nanos = st.one_of(st.sampled_from(_NANOS_EDGES), st.just(0), _ints(*I32))
        return st.tuples(seconds, nanos)

    # ------------------------------------------------------------------ messages

    def message(self, desc: descriptor.Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
        """Any ``desc`` message: wild (every field random or extreme) one time in four,
        otherwise tame (plausible values) with up to two wild fields, so a single extreme value
        reaches the code behind the validation of the others."""
        key = f"any:{desc.full_name}"
        if key not in self._cache:
            if desc.full_name in _TIME_TYPES:
                self._cache[key] = st.one_of(self._time(desc, wild=True), self._time(desc, wild=False))
            else:
                tame = st.deferred(lambda: self._tame(desc, depth))
                self._cache[key] = weighted((3, tame), (1, st.deferred(lambda: self._wild(desc, depth))))
        return self._cache[key]

    def _time(self, desc: descriptor.Descriptor, wild: bool, short: bool = False) -> st.SearchStrategy[Message]:
        """A Timestamp or Duration: wild (:meth:`_seconds_nanos`) or plausible (within an hour of
        now; 0–60 s, or 0–0.2 s when ``short``, for a long-poll wait)."""
        # A message class made at run time: its fields are not in the stubs (types-protobuf
        # 7.35.1.20261122 types it as a bare Message, whose __init__ takes no fields).
        cls: Any = message_factory.GetMessageClass(desc)
        relative = desc.full_name == "google.protobuf.Timestamp"
        if wild:
            pairs = self._seconds_nanos(relative)
        elif relative:  # within an hour of now
            pairs = st.tuples(st.integers(-3600, 3600).map(lambda d: int(time.time()) + d), st.integers(0, 999_999_999))
        elif short:
            pairs = st.tuples(st.just(0), st.sampled_from([0, 1_000_000, 50_000_000, 200_000_000]))
        else:
            pairs = st.tuples(st.sampled_from([0, 1, 5, 30, 60]), st.sampled_from([0, 1_000_000, 500_000_000]))
        return pairs.map(lambda sn: cls(seconds=sn[0], nanos=sn[1]))

    def _members(self, desc: descriptor.Descriptor) -> tuple[list[FieldDescriptor], list[list[FieldDescriptor]]]:
        """Plain fields (proto3 ``optional`` included) and the members of each real oneof."""
        plain: list[FieldDescriptor] = []
        groups: list[list[FieldDescriptor]] = []
        for oneof in desc.oneofs:
            members = list(oneof.fields)
            if not (len(members) == 1 and oneof.name == f"_{members[0].name}"):  # not a synthetic `optional`
                groups.append(members)
        for field in desc.fields:
            group = field.containing_oneof
            if group is None or (len(group.fields) == 1 and group.name == f"_{field.name}"):
                plain.append(field)
        return plain, groups

    def _wild(self, desc: descriptor.Descriptor, depth: int) -> st.SearchStrategy[Message]:
        """Every field absent or random/extreme; one member (or none) of each oneof."""
        cls = message_factory.GetMessageClass(desc)
        if desc.full_name in _TIME_TYPES:
            return self._time(desc, wild=True)
        if depth > 5:
            return st.builds(cls)
        plain, groups = self._members(desc)
        fields = {f.name: self.value(f, desc, depth) for f in plain}
        oneofs = [st.one_of(st.none(), *(st.tuples(st.just(f.name), self.value(f, desc, depth)) for f in members))
                  for members in groups]
        return st.builds(_assemble, st.just(cls), st.fixed_dictionaries({}, optional=fields),
                         st.tuples(*oneofs) if oneofs else st.just(()))

    def _tame(self, desc: descriptor.Descriptor, depth: int) -> st.SearchStrategy[Message]:
        """Plausible values (each field present 7 times in 8, those naming a row always),
        except up to two wild fields.
        A job id and a lease id in one message are drawn as a real pair."""
        cls = message_factory.GetMessageClass(desc)
        if desc.full_name in _TIME_TYPES:
            return self._time(desc, wild=False)
        plain, groups = self._members(desc)
        names = [f.name for f in plain] + [f.name for members in groups for f in members]
        paired = {"job_id", "lease_id"} <= set(names)
        # Fields that name a row (queue, job id, lease id, key) are wild less often and always
        # present when tame, so most requests reach the code behind the lookup.
        weighted = [n for n in names for _ in range(1 if n in HINTS else 3)]
        # The strategies drawn below, built once here rather than at every draw (see the class doc).
        counts = st.sampled_from([0, 0, 0, 1, 1, 2])
        wild_sets = {count: st.sets(st.sampled_from(weighted), min_size=min(count, 1), max_size=count)
                     for count in (0, 1, 2)} if names else {}
        members_of = [st.one_of(st.none(), st.sampled_from(members)) for members in groups]

        @st.composite
        def build(draw: st.DrawFn) -> Message:
            wild: set[str] = set()
            if names and depth <= 5:
                count = draw(counts)
                wild = draw(wild_sets[count])
            values: dict[str, Any] = {}
            for f in plain:
                if f.name in wild:
                    values[f.name] = draw(self.value(f, desc, depth))
                elif f.name in HINTS or draw(st.integers(0, 7)):
                    values[f.name] = draw(self.tame_value(f, desc, depth))
            if paired and draw(st.integers(0, 3)):
                job_id, lease_id = self.pool.pair(draw(st.integers(0, 2**16)))
                values.update({k: v for k, v in (("job_id", job_id), ("lease_id", lease_id)) if k not in wild})
            oneofs: list[tuple[str, Any] | None] = []
            for members in members_of:
                chosen = draw(members)
                if chosen is not None:
                    strategy = self.value if chosen.name in wild else self.tame_value
                    oneofs.append((chosen.name, draw(strategy(chosen, desc, depth))))
            return _assemble(cls, values, oneofs)

        return build()

    def _cached(self, how: str, field: FieldDescriptor, parent: descriptor.Descriptor, depth: int,
                build: Callable[[FieldDescriptor, descriptor.Descriptor, int], st.SearchStrategy[Any]]
                ) -> st.SearchStrategy[Any]:
        key = (how, field.full_name, parent.full_name, depth)
        strategy = self._values.get(key)
        if strategy is None:
            strategy = self._values[key] = build(field, parent, depth)
        return strategy

    def tame_value(self, field: FieldDescriptor, parent: descriptor.Descriptor, depth: int) -> st.SearchStrategy[Any]:
        """A plausible value for ``field``: pool strings, small numbers, known enum values,
        short lists and maps, times near now, valid field-mask paths (built once per field,
        parent and depth)."""
        return self._cached("tame", field, parent, depth, self._build_tame_value)

    def _build_tame_value(self, field: FieldDescriptor, parent: descriptor.Descriptor, depth: int
                          ) -> st.SearchStrategy[Any]:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_f = field.message_type.fields_by_name["value"]
            if field.name == "trace_context":
                entries: st.SearchStrategy[Any] = st.sampled_from(
                    [("traceparent", _TRACEPARENT), ("tracestate", "vendor=v1")])
            else:
                entries = st.tuples(st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True),
                                    self.tame_value(value_f, field.message_type, depth + 1))
            return st.lists(entries, max_size=3)
        if field.message_type is not None:
            if field.message_type.full_name == "google.protobuf.FieldMask":
                # Empty (the implied mask), every path (so a wild sibling value is applied) or a few.
                paths = _paths(parent) or [""]
                one: st.SearchStrategy[Any] = st.builds(_mask, st.one_of(
                    st.just([]), st.just(paths), st.lists(st.sampled_from(paths), min_size=1, max_size=3, unique=True)))
            elif field.message_type.full_name in _TIME_TYPES:
                one = self._time(field.message_type, wild=False, short=field.name == "wait")
            elif depth > 5:
                one = st.builds(message_factory.GetMessageClass(field.message_type))
            else:
                one = st.deferred(lambda: self._tame(_sub(field), depth + 1))
        else:
            one = self._tame_scalar(field)
        return st.lists(one, min_size=1, max_size=3) if field.is_repeated else one

    def _tame_scalar(self, field: FieldDescriptor) -> st.SearchStrategy[Any]:
        cpp = field.cpp_type
        if cpp in _INT_RANGES:
            return st.one_of(st.integers(0, 10), st.sampled_from([1, 5, 9, 30, 100, 256, 1000]))
        if cpp in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
            return st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0])
        if cpp == FieldDescriptor.CPPTYPE_BOOL:
            return st.booleans()
        if cpp == FieldDescriptor.CPPTYPE_ENUM:
            return st.sampled_from([v.number for v in _enum(field).values])
        if field.type == FieldDescriptor.TYPE_BYTES:
            return st.binary(max_size=64)
        kind = HINTS.get(field.name)
        plain = st.from_regex(r"[a-z][a-z0-9._-]{0,15}", fullmatch=True)
        if kind is None:
            return st.one_of(plain, self.pooled(None))
        return weighted((7, self.pooled(kind)), (1, plain))

    def value(self, field: FieldDescriptor, parent: descriptor.Descriptor, depth: int) -> st.SearchStrategy[Any]:
        """A wild value for ``field`` of ``parent``: a list for repeated fields, a list of pairs
        for maps (built once per field, parent and depth)."""
        return self._cached("wild", field, parent, depth, self._build_value)

    def _build_value(self, field: FieldDescriptor, parent: descriptor.Descriptor, depth: int
                     ) -> st.SearchStrategy[Any]:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            return self._map(field, depth)
        if field.message_type is not None:
            if field.message_type.full_name == "google.protobuf.FieldMask":
                one: st.SearchStrategy[Any] = st.builds(
                    _mask, st.lists(st.one_of(st.sampled_from(_paths(parent) or [""]), self.text()), max_size=4))
            elif field.message_type.full_name in _TIME_TYPES:
                one = self._time(field.message_type, wild=True)
            else:
                one = self.message(field.message_type, depth + 1)
        else:
            one = self.scalar(field)
        if not field.is_repeated:
            return one
        big = st.tuples(one, st.sampled_from(_BIG_COUNTS)).map(_replicate(self.budget))
        if field.type == FieldDescriptor.TYPE_STRING:  # distinct values too (queue lists, encodings)
            big = st.one_of(big, st.tuples(one, st.sampled_from(_BIG_COUNTS)).map(
                lambda d: [f"{d[0]}{i}" for i in range(min(d[1], self.budget // max(1, len(d[0]) + 4)))]))
        return st.one_of(st.lists(one, max_size=4), big)

    def _map(self, field: FieldDescriptor, depth: int) -> st.SearchStrategy[list[tuple[str, Any]]]:
        entry = _sub(field)
        key_f, value_f = entry.fields_by_name["key"], entry.fields_by_name["value"]
        keys = self.text() if field.name != "trace_context" else st.one_of(
            st.sampled_from(["traceparent", "tracestate"]), self.text())
        if value_f.message_type is not None:
            values: st.SearchStrategy[Any] = self.message(value_f.message_type, depth + 1)
        else:
            values = self.scalar(value_f)
        assert key_f.type == FieldDescriptor.TYPE_STRING, "sepp's maps are keyed by string"
        small = st.lists(st.tuples(keys, values), max_size=4)

        def spread(d: tuple[tuple[str, Any], int]) -> list[tuple[str, Any]]:
            (key, value), n = d
            size = len(key) + 8 + (value.ByteSize() if isinstance(value, Message) else len(str(value)))
            return [(f"{key}{i}", value) for i in range(max(1, min(n, self.budget // size)))]

        return st.one_of(small, st.tuples(st.tuples(keys, values), st.sampled_from(_BIG_COUNTS)).map(spread))

    def request(self, rpc: Rpc) -> st.SearchStrategy[Message]:
        """A request for ``rpc``: a mutant of one the server accepted (two times in five),
        else :meth:`message` (tame with a few wild fields, or wild)."""
        if rpc.path not in self._cache:
            self._cache[rpc.path] = weighted((2, self.mutant(rpc)), (3, self.message(rpc.input)))
        return self._cache[rpc.path]

    def mutant(self, rpc: Rpc) -> st.SearchStrategy[Message]:
        """A request the server answered OK before (:meth:`Pool.kept`) with one field — at
        any depth, through repeated messages too — replaced by a wild value (or, now and then,
        sent again as it was). The draws do not
        depend on what the pool holds (hypothesis wants the same draws for the same choices)."""
        paths = _leaf_paths(rpc.input)
        if not paths:
            return st.builds(message_factory.GetMessageClass(rpc.input))
        values = [self.value(path[-1], cast(descriptor.Descriptor, path[-1].containing_type), len(path))
                  for path in paths]

        @st.composite
        def build(draw: st.DrawFn) -> Message:
            base = self.pool.kept(rpc, draw(st.integers(0, 2**16)))
            which = draw(st.integers(0, len(paths)))  # len(paths): sent again unchanged
            element = draw(st.integers(0, 255))
            if which < len(paths):
                _put(base, paths[which], element, draw(values[which]))
            return base

        return build()


def _sub(field: FieldDescriptor) -> descriptor.Descriptor:
    """The message type of a message field."""
    assert field.message_type is not None, field.full_name
    return field.message_type


def _enum(field: FieldDescriptor) -> descriptor.EnumDescriptor:
    """The enum type of an enum field."""
    assert field.enum_type is not None, field.full_name
    return field.enum_type


def _leaf_paths(desc: descriptor.Descriptor, depth: int = 0) -> list[tuple[FieldDescriptor, ...]]:
    """Every field reachable from ``desc`` through message fields (singular or repeated; maps,
    Timestamps, Durations and FieldMasks are leaves), to four levels: the fields a mutant changes."""
    out: list[tuple[FieldDescriptor, ...]] = []
    for field in desc.fields:
        out.append((field,))
        sub = field.message_type
        if (sub is not None and depth < 3 and not sub.GetOptions().map_entry
                and not sub.full_name.startswith("google.protobuf.")):
            out.extend((field, *rest) for rest in _leaf_paths(sub, depth + 1))
    return out


def _put(msg: Message, path: tuple[FieldDescriptor, ...], element: int, value: Any) -> None:
    """Set the field at ``path`` of ``msg`` to ``value`` (a list for repeated fields, pairs for
    maps); a repeated message on the way is entered at ``element`` modulo its length (one is
    added when it is empty)."""
    for field in path[:-1]:
        if field.is_repeated:
            items = getattr(msg, field.name)
            msg = items[element % len(items)] if len(items) else items.add()
        else:
            msg = getattr(msg, field.name)
    _assemble_into(msg, {path[-1].name: value})


def _paths(desc: descriptor.Descriptor) -> list[str]:
    """Field-mask paths into the message fields of ``desc`` (two levels), e.g.
    ``settings`` → ``default_priority``, ``limits``, ``limits.max_payload_bytes``."""
    out: list[str] = []
    for field in desc.fields:
        sub = field.message_type
        if sub is None or sub.full_name.startswith("google.protobuf.") or sub.GetOptions().map_entry:
            continue
        for f in sub.fields:
            out.append(f.name)
            if f.message_type is not None and not f.message_type.full_name.startswith("google.protobuf."):
                out.extend(f"{f.name}.{g.name}" for g in f.message_type.fields)
    return out


def _mask(paths: list[str]) -> Message:
    return field_mask_pb2.FieldMask(paths=paths)


def _assemble(cls: type[Message], values: dict[str, Any], oneofs: Sequence[tuple[str, Any] | None]) -> Message:
    msg = cls()
    _assemble_into(msg, {**values, **dict(choice for choice in oneofs if choice is not None)})
    return msg


def _assemble_into(msg: Message, values: dict[str, Any]) -> None:
    """Set the fields named in ``values`` (replacing what they held)."""
    desc = msg.DESCRIPTOR
    for name, value in values.items():
        field = desc.fields_by_name[name]
        target: Any = getattr(msg, name) if field.message_type is not None or field.is_repeated else None
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            target.clear()
            for key, item in value:
                if isinstance(item, Message):
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.is_repeated:
            del target[:]
            target.extend(value)
        elif field.message_type is not None:
            target.CopyFrom(value)
            target.SetInParent()  # an empty sub-message is still "set" (presence)
        else:
            setattr(msg, name, value)


# ---------------------------------------------------------------------- calling and judging


@dataclass(frozen=True)
class Verdict:
    """The answer to one fuzzed call: its status, ErrorInfo reason, message, and ``problem``
    (``None`` when the answer keeps the contract, else what is wrong)."""

    rpc: str
    code: str
    reason: str
    message: str
    problem: str | None
    #: The ErrorInfo's ``field`` metadata, if any.
    field: str = ""

    @property
    def failure_class(self) -> tuple[str, str, str, str]:
        """(rpc, code, reason, message shape): digits and long tails folded, so one cause is one class."""
        shape = "".join("#" if c.isdigit() else c for c in self.message[:90])
        return (self.rpc, self.code, self.reason, shape)


def judge(rpc: Rpc, request: Message, error: grpc.RpcError | None, *, max_message_bytes: int = MAX_MESSAGE_BYTES,
          ) -> Verdict:
    """Hold one answer to the contract: a status from :data:`ALLOWED_CODES`; for a non-OK
    answer a ``google.rpc.Status`` in ``grpc-status-details-bin`` whose code matches and that
    carries an ``ErrorInfo`` in domain ``sepp`` with a reason (except the client's own
    DEADLINE_EXCEEDED, and gRPC's RESOURCE_EXHAUSTED for a request over ``max_message_bytes``);
    trailers within :data:`MAX_TRAILER_BYTES`."""
    if error is None:
        return Verdict(rpc.label, "OK", "", "", None)
    code: Any = error.code()  # a grpc.StatusCode
    text: str = error.details() or ""  # type: ignore[attr-defined]
    trailers = error.trailing_metadata() or ()  # type: ignore[attr-defined]
    reason = field = ""
    problems: list[str] = []
    status: status_pb2.Status | None = None
    for key, value in trailers:
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                status = status_pb2.Status.FromString(value)
            except Exception as exc:  # a broken trailer is a broken answer
                problems.append(f"grpc-status-details-bin does not parse: {exc}")
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason
                field = info.metadata.get("field", "")
                if info.domain != ERROR_DOMAIN:
                    problems.append(f"ErrorInfo domain {info.domain!r}, not {ERROR_DOMAIN!r}")
        if status.code != code.value[0]:
            problems.append(f"google.rpc.Status code {status.code} differs from the gRPC status {code.name}")
    if code not in ALLOWED_CODES:
        problems.insert(0, f"status {code.name} is not in the documented set")
    needs_details = ALLOWED_CODES.get(code, True)
    if code == Code.RESOURCE_EXHAUSTED and status is None and request.ByteSize() > max_message_bytes:
        needs_details = False  # gRPC's own message cap
    if needs_details and not reason:
        problems.append("no ErrorInfo with a reason in grpc-status-details-bin")
    size = sum(len(k) + len(v) for k, v in trailers) + len(text.encode())
    if size > MAX_TRAILER_BYTES:
        problems.append(f"{size} bytes of trailers and message (> {MAX_TRAILER_BYTES})")
    return Verdict(rpc.label, code.name, reason, text, "; ".join(problems) or None, field[:40])


class Caller:
    """Calls :class:`Rpc` s on one channel with their generated (de)serializers."""

    def __init__(self, channel: grpc.Channel, timeout: float = CALL_TIMEOUT) -> None:
        self.channel = channel
        self.timeout = timeout
        self._methods: dict[str, Any] = {}

    def method(self, rpc: Rpc) -> Any:
        """The unary-unary multicallable of ``rpc``."""
        if rpc.path not in self._methods:
            out = message_factory.GetMessageClass(rpc.output)
            self._methods[rpc.path] = self.channel.unary_unary(
                rpc.path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=out.FromString)
        return self._methods[rpc.path]

    def call(self, rpc: Rpc, request: Message, pool: Pool | None = None) -> Verdict:
        """One blocking call, judged; the answer's ids go to ``pool``."""
        try:
            answer = self.method(rpc)(request, timeout=self.timeout)
        except grpc.RpcError as err:
            return judge(rpc, request, err)
        if pool is not None:
            pool.learn(answer)
            pool.keep(rpc, request)
        return judge(rpc, request, None)


def show(request: Message, limit: int = 600) -> str:
    """``request`` as one-line text-format proto, cut to ``limit`` characters (with its size)."""
    text = text_format.MessageToString(request, as_one_line=True, as_utf8=True)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text)} chars, {request.ByteSize()} bytes serialized)"
    return text


# ---------------------------------------------------------------------- seeding and health

#: ServerConfig of a fuzzed server: fast sweeps (leases expire and poison rows are met within
#: the run) and a short long-poll cap (``max_reserve_wait`` 0.2 s), so a Reserve never waits
#: long and a wait above the cap is a quick INVALID_ARGUMENT.
SERVER_CONFIG: dict[str, Any] = {"sweep_interval": 0.05, "shutdown_grace": 5.0, "limits": {"max_reserve_wait": 0.2}}

#: Queues :func:`seed` declares: defaults, one with a short dedup window and retention, one
#: where the first failed delivery dead-letters.
SEED_QUEUES = ("fuzz-a", "fuzz-b", "fuzz-dlq")


_seed_rounds = iter(range(10**9))


class _Refused(Exception):
    """A seeding call was refused (only raised inside :func:`seed`)."""


def seed(channel: grpc.Channel, pool: Pool, jobs_per_queue: int = 6, *,
         reset_settings: bool = True) -> list[tuple[Verdict, Message]]:
    """Set :data:`SEED_QUEUES` back to known settings and store jobs in every state there:
    READY and SCHEDULED (one an hour ahead), RESERVED (lease 60 s, and 1 s so it expires),
    COMPLETED, DEAD_LETTERED, CANCELLED; then delete a scratch queue. Every RPC is called at
    least once with a request it accepts; names, ids, keys and leases go to ``pool`` and
    the requests to its corpus (:meth:`Pool.keep`).

    With ``reset_settings`` every call must succeed (``grpc.RpcError`` otherwise). Without
    it a setting the fuzzer stored stays, so the rows seeded now meet it; a refused call
    skips the rest of its queue, and the refusals are returned judged (a stored setting
    that makes an Ack answer UNKNOWN shows here)."""
    c = Caller(channel)
    by = {r.label: r for r in rpcs()}
    refused: list[tuple[Verdict, Message]] = []

    def do(label: str, req: Message) -> Any:
        try:
            answer = c.method(by[label])(req, timeout=CALL_TIMEOUT)
        except grpc.RpcError as err:
            if reset_settings:
                raise
            refused.append((judge(by[label], req, err), req))
            raise _Refused from err
        pool.learn(answer)
        pool.keep(by[label], req)
        return answer

    try:
        _seed_rows(do, pool, jobs_per_queue, reset_settings)
    except _Refused:
        pass
    return refused


def _seed_rows(do: Callable[[str, Message], Any], pool: Pool, jobs_per_queue: int, reset_settings: bool) -> None:
    """The body of :func:`seed`; ``do`` makes one call."""
    round_ = next(_seed_rounds)
    overrides = {"fuzz-b": QueueSettings(dedup_window=60.0, completed_retention=120.0),
                 "fuzz-dlq": QueueSettings(default_max_attempts=1)}
    every_path = field_mask_pb2.FieldMask(paths=[f.name for f in pb.QueueSettings.DESCRIPTOR.fields])
    for name in SEED_QUEUES:  # every setting back to a known value (the fuzzer changes them)
        try:
            _seed_queue(do, pool, name, round_, jobs_per_queue, reset_settings,
                        queue_settings_proto(overrides.get(name, QueueSettings())), every_path)
        except _Refused:
            continue
    _seed_tail(do, round_)


def _seed_queue(do: Callable[[str, Message], Any], pool: Pool, name: str, round_: int, jobs_per_queue: int,
                reset_settings: bool, settings: pb.QueueSettings, every_path: field_mask_pb2.FieldMask) -> None:
    """One seeded queue (see :func:`seed`)."""
    if reset_settings:
        do("AdminService.DeclareQueue", apb.DeclareQueueRequest(name=name, settings=settings,
                                                                update_mask=every_path))
        do("AdminService.UpdateQueue", apb.UpdateQueueRequest(name=name, settings=settings, update_mask=every_path))
    else:
        do("AdminService.DeclareQueue", apb.DeclareQueueRequest(name=name))
    do("AdminService.PauseQueue", apb.PauseQueueRequest(name=name))
    do("AdminService.ResumeQueue", apb.ResumeQueueRequest(name=name))
    do("AdminService.GetQueue", apb.GetQueueRequest(name=name))
    pool.add("queue", name, sticky=True)
    jobs = []
    for i in range(jobs_per_queue):
        key = f"{name}-key-{round_}-{i}"
        job = pb.EnqueueRequest(queue=name, job_type=("email", "report")[i % 2], idempotency_key=key,
                                payload=pb.Payload(data=b'{"n": %d}' % i, encoding="application/json"))
        job.custom["n"].int_value = i
        job.trace_context["traceparent"] = _TRACEPARENT
        if i == jobs_per_queue - 1:
            job.scheduled_at.FromSeconds(int(time.time()) + 3600)
        jobs.append(job)
        pool.add("key", key, sticky=True)
    do("ProducerService.EnqueueBatch", ppb.EnqueueBatchRequest(jobs=jobs[1:]))
    do("ProducerService.Enqueue", jobs[0])
    twice = [pb.EnqueueRequest(queue=name, job_type="t")] * 2
    do("ProducerService.EnqueueAtomic", ppb.EnqueueBatchRequest(jobs=twice))
    got = do("WorkerService.Reserve", wpb.ReserveRequest(queues=[name], max_jobs=3, lease_duration=_dur(60),
                                                         worker_id="fuzz-seed")).reservations
    if len(got) == 3:
        first, second, third = got
        do("WorkerService.Ack", wpb.AckRequest(job_id=first.job.id, lease_id=first.lease_id))
        do("WorkerService.Nack", wpb.NackRequest(job_id=second.job.id, lease_id=second.lease_id,
                                                 dead_letter="seeded", error=wpb.JobError(message="seeded")))
        do("WorkerService.ExtendLease", wpb.ExtendLeaseRequest(job_id=third.job.id, lease_id=third.lease_id,
                                                               extend_by=_dur(60)))
        again = wpb.SettleItem(ack=wpb.AckRequest(job_id=first.job.id, lease_id=first.lease_id))
        do("WorkerService.Settle", wpb.SettleRequest(items=[again]))
        do("AdminService.GetJob", apb.GetJobRequest(job_id=first.job.id))
    do("WorkerService.Reserve", wpb.ReserveRequest(queues=[name], max_jobs=1, lease_duration=_dur(1),
                                                   worker_id="fuzz-seed"))
    ready = do("AdminService.ListJobs", apb.ListJobsRequest(queue=name, state=pb.READY, page_size=2)).jobs
    for summary in ready:
        do("AdminService.CancelJob", apb.CancelJobRequest(job_id=summary.job.id, reason="seeded"))
    if ready:
        do("AdminService.RequeueJob", apb.RequeueJobRequest(job_id=ready[0].job.id))
    do("AdminService.FindJobByIdempotencyKey",
       apb.FindJobByIdempotencyKeyRequest(queue=name, key=jobs[0].idempotency_key))
    do("AdminService.GetQueueStats", apb.GetQueueStatsRequest(queues=[name]))


def _seed_tail(do: Callable[[str, Message], Any], round_: int) -> None:
    """The calls of :func:`seed` across queues, and a scratch queue deleted."""
    do("AdminService.ListJobs", apb.ListJobsRequest(page_size=2))  # a page token for the pool
    do("AdminService.RequeueDeadLettered", apb.RequeueDeadLetteredRequest(
        filter=apb.DeadLetterFilter(queue=SEED_QUEUES[0]), dry_run=True))
    scratch = f"fuzz-scratch-{round_}"
    ack = do("ProducerService.Enqueue", pb.EnqueueRequest(queue=scratch, job_type="t"))
    do("ProducerService.Enqueue", pb.EnqueueRequest(queue=scratch, job_type="t"))
    do("AdminService.DeleteJob", apb.DeleteJobRequest(job_id=ack.job_id))
    do("AdminService.PurgeQueue", apb.PurgeQueueRequest(queue=scratch))
    do("AdminService.DeleteQueue", apb.DeleteQueueRequest(name=scratch, force=True))
    do("AdminService.ListQueues", apb.ListQueuesRequest())  # last: a stored setting may break these two
    do("ProducerService.GetServerInfo", ppb.GetServerInfoRequest())


def _dur(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


_health_counter = iter(range(10**9))


def check_serving(target: str) -> None:
    """The server still serves: the health check says SERVING, a default ``Client.enqueue``
    (which reads ``GetServerInfo`` first) stores a job on a fresh queue, Reserve hands it
    out and Ack completes it, and ``ListQueues`` answers. Raises ``AssertionError`` (or the
    client's error) otherwise."""
    from sepp.client import Client
    from sepp.request import EnqueueRequest

    queue = f"health-{uuid.uuid4().hex[:8]}-{next(_health_counter)}"
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT)
        assert health.status == health_pb2.HealthCheckResponse.SERVING, health
        with Client(target) as client:
            ack = client.enqueue(EnqueueRequest(queue, "health"))
        c = Caller(channel)
        by = {r.label: r for r in rpcs()}
        got = c.method(by["WorkerService.Reserve"])(
            wpb.ReserveRequest(queues=[queue], max_jobs=1, lease_duration=_dur(30), worker_id="fuzz-health"),
            timeout=CALL_TIMEOUT).reservations
        assert [r.job.id for r in got] == [ack.job_id], f"reserve gave {[r.job.id for r in got]}, not {ack.job_id}"
        c.method(by["WorkerService.Ack"])(wpb.AckRequest(job_id=ack.job_id, lease_id=got[0].lease_id),
                                         timeout=CALL_TIMEOUT)
        c.method(by["AdminService.ListQueues"])(apb.ListQueuesRequest(), timeout=CALL_TIMEOUT)


def peak_rss_kib(pid: int) -> dict[int, int]:
    """VmHWM (peak resident set, KiB) of ``pid`` and its child processes (the writer), from /proc."""
    out: dict[int, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out[pid] = int(line.split()[1])
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return out
    for child in children:
        out.update(peak_rss_kib(child))
    return out

