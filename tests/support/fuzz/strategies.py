"""Hypothesis strategies for structurally valid requests (``Requests``), built from the
proto descriptors with random and extreme values: tame (plausible, from the ``Pool``),
wild (random or extreme) and mutants (an accepted request with one field replaced)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal, cast

from google.protobuf import descriptor, message_factory
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import strategies as st

from support.fuzz.messages import assemble, enum_type, field_mask, field_paths, leaf_paths, put_value, sub_message
from support.fuzz.pool import HINTS, Pool
from support.fuzz.rpcs import Message, Rpc

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
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
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
            enum = enum_type(field)
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
        return st.builds(assemble, st.just(cls), st.fixed_dictionaries({}, optional=fields),
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
            return assemble(cls, values, oneofs)

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
                    [("traceparent", TRACEPARENT), ("tracestate", "vendor=v1")])
            else:
                entries = st.tuples(st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True),
                                    self.tame_value(value_f, field.message_type, depth + 1))
            return st.lists(entries, max_size=3)
        if field.message_type is not None:
            if field.message_type.full_name == "google.protobuf.FieldMask":
                # Empty (the implied mask), every path (so a wild sibling value is applied) or a few.
                paths = field_paths(parent) or [""]
                one: st.SearchStrategy[Any] = st.builds(field_mask, st.one_of(
                    st.just([]), st.just(paths), st.lists(st.sampled_from(paths), min_size=1, max_size=3, unique=True)))
            elif field.message_type.full_name in _TIME_TYPES:
                one = self._time(field.message_type, wild=False, short=field.name == "wait")
            elif depth > 5:
                one = st.builds(message_factory.GetMessageClass(field.message_type))
            else:
                one = st.deferred(lambda: self._tame(sub_message(field), depth + 1))
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
            return st.sampled_from([v.number for v in enum_type(field).values])
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
                one: st.SearchStrategy[Any] = st.builds(field_mask, st.lists(
                    st.one_of(st.sampled_from(field_paths(parent) or [""]), self.text()), max_size=4))
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
        entry = sub_message(field)
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
        paths = leaf_paths(rpc.input)
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
                put_value(base, paths[which], element, draw(values[which]))
            return base

        return build()
