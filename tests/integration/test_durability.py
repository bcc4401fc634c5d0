"""Durability under ``kill -9`` (seed "Read the enqueue response"; SPEC §5).

In ``group`` and ``sync`` persist modes, 8 producer threads enqueue with unique
idempotency keys — single, batch and atomic calls — while the server is SIGKILLed
three times mid-load and restarted on the same data folder. Afterwards, through the
API only:

* every job whose ack reached a producer is present exactly once (reserve everything
  with ``WorkerService.Reserve`` and compare ids: each acked id is delivered, no id
  twice);
* the idempotency keys of acked jobs survived too (re-sending them dedups to the same id);
* a request that failed in flight created at most one job: re-sending it resolves its
  fate, and then the delivered set is exactly acked ∪ resolved.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from support.producer import connect, job
from support.servers import ServerFactory
from support.stubs import CHANNEL_OPTIONS

from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc
from sepp.testing import ServerProcess

PRODUCERS = 8
KILLS = 3
QUEUE = "durable"
#: Errors a producer may see while the server dies and comes back.
TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


class Producer(threading.Thread):
    """Enqueues until stopped; remembers the acked keys (→ id) and the uncertain ones."""

    def __init__(self, index: int, proc: ServerProcess, stop: threading.Event) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index = index
        self.proc = proc
        self.stop = stop
        self.acked: dict[str, str] = {}
        self.uncertain: list[str] = []
        self.errors: Counter[str] = Counter()
        self.problems: list[str] = []

    def _calls(self) -> Iterator[list[str]]:
        n = 0
        while True:
            size = (1, 4, 3)[self.index % 3]
            yield [f"p{self.index}-{n + i}" for i in range(size)]
            n += size

    def run(self) -> None:
        target: str = ""
        channel: grpc.Channel | None = None
        stub: Any = None
        method = ("Enqueue", "EnqueueBatch", "EnqueueAtomic")[self.index % 3]
        for keys in self._calls():
            if self.stop.is_set():
                break
            if self.proc.grpc_target != target or channel is None:
                if channel is not None:
                    channel.close()
                target = self.proc.grpc_target
                channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
                stub = producer_pb2_grpc.ProducerServiceStub(channel)
            reqs = [job(QUEUE, f"p{self.index}", data=k.encode(), key=k) for k in keys]
            try:
                if method == "Enqueue":
                    acks = [stub.Enqueue(reqs[0], timeout=5)]
                elif method == "EnqueueBatch":
                    results = stub.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=reqs), timeout=5).results
                    acks = [r.ack for r in results]
                    if any(r.WhichOneof("outcome") != "ack" for r in results):
                        self.problems.append(f"batch result not an ack: {results}")
                else:
                    acks = list(stub.EnqueueAtomic(ppb.EnqueueBatchRequest(jobs=reqs), timeout=5).acks)
            except grpc.RpcError as err:
                code = err.code()  # type: ignore[attr-defined]
                self.errors[code.name] += 1
                if code not in TRANSIENT:
                    self.problems.append(f"{method}: unexpected {code.name}: {err.details()}")  # type: ignore[attr-defined]
                self.uncertain.extend(keys)
                time.sleep(0.02)
                continue
            for key, ack in zip(keys, acks, strict=True):
                if ack.deduplicated:
                    self.problems.append(f"fresh key {key} came back deduplicated")
                self.acked[key] = ack.job_id
        if channel is not None:
            channel.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["group", "sync"])
def test_every_acked_job_survives_repeated_kill_9_exactly_once(server_factory: ServerFactory, mode: str) -> None:
    """SIGKILL ×3 mid-load and restart on the same data folder: every acked job is
    delivered exactly once afterwards, and nothing else but what failed in flight."""
    proc = server_factory(persist_mode=mode)
    rng = random.Random()
    stop = threading.Event()
    producers = [Producer(i, proc, stop) for i in range(PRODUCERS)]
    for p in producers:
        p.start()

    def acked() -> int:
        return sum(len(p.acked) for p in producers)

    try:
        for _ in range(KILLS):
            before = acked()
            deadline = time.monotonic() + 30
            # Let the load run a random while, but at least until new acks arrive.
            pause_until = time.monotonic() + rng.uniform(0.3, 0.8)
            while time.monotonic() < pause_until or acked() <= before + 20:
                assert time.monotonic() < deadline, "producers make no progress"
                time.sleep(0.01)
            proc.kill()
            proc.start()
        before = acked()
        while acked() <= before + 20:
            time.sleep(0.01)
    finally:
        stop.set()
        for p in producers:
            p.join(15)

    problems = [msg for p in producers for msg in p.problems]
    assert not problems, problems[:5]
    acked_ids = {key: job_id for p in producers for key, job_id in p.acked.items()}
    uncertain = [key for p in producers for key in p.uncertain]
    assert len(acked_ids) > 100

    with connect(proc.grpc_target) as s:
        resolved: dict[str, str] = {}
        for i in range(0, len(uncertain), 256):
            chunk = uncertain[i:i + 256]
            results = s.batch(job(QUEUE, "x", data=k.encode(), key=k) for k in chunk)
            resolved.update((k, r.ack.job_id) for k, r in zip(chunk, results, strict=True))
        keys = list(acked_ids)
        for i in range(0, len(keys), 256):
            chunk = keys[i:i + 256]
            results = s.batch(job(QUEUE, "x", key=k) for k in chunk)
            lost = [k for k, r in zip(chunk, results, strict=True)
                    if (r.ack.job_id, r.ack.deduplicated) != (acked_ids[k], True)]
            assert not lost, f"idempotency keys of acked jobs lost: {lost[:5]}"
        delivered = [j.id for j in s.reserve_all([QUEUE])]

    counts = Counter(delivered)
    twice = [job_id for job_id, n in counts.items() if n > 1]
    assert not twice, f"jobs delivered twice: {twice[:5]}"
    missing = set(acked_ids.values()) - set(counts)
    assert not missing, f"{len(missing)} acked jobs lost after kill -9, e.g. {sorted(missing)[:3]}"
    assert set(counts) == set(acked_ids.values()) | set(resolved.values()), "unexpected jobs appeared"


class PlainProducer(threading.Thread):
    """Enqueues plain jobs (no idempotency key, custom map or new queue: the lone-write
    path) until stopped, ``size`` a call (1: Enqueue, else EnqueueBatch), one call at a
    time; remembers every acked job id."""

    def __init__(self, index: int, size: int, proc: ServerProcess, stop: threading.Event) -> None:
        super().__init__(name=f"plain-{index}", daemon=True)
        self.index, self.size, self.proc, self.stop = index, size, proc, stop
        self.acked: list[str] = []
        self.problems: list[str] = []

    def run(self) -> None:
        target, channel, stub = "", None, None
        n = 0
        while not self.stop.is_set():
            if self.proc.grpc_target != target or channel is None:
                if channel is not None:
                    channel.close()
                target = self.proc.grpc_target
                channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
                stub = producer_pb2_grpc.ProducerServiceStub(channel)
            assert stub is not None
            reqs = [job(QUEUE, "plain", data=f"{self.index}-{n + i}".encode()) for i in range(self.size)]
            n += self.size
            try:
                if self.size == 1:
                    ids = [stub.Enqueue(reqs[0], timeout=5).job_id]
                else:
                    results = stub.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=reqs), timeout=5).results
                    if any(r.WhichOneof("outcome") != "ack" for r in results):
                        self.problems.append(f"batch result not an ack: {results[:2]}")
                    ids = [r.ack.job_id for r in results]
            except grpc.RpcError as err:
                if err.code() not in TRANSIENT:  # type: ignore[attr-defined]
                    self.problems.append(f"unexpected {err.code().name}: {err.details()}")  # type: ignore[attr-defined]
                time.sleep(0.02)
                continue
            self.acked.extend(ids)
        if channel is not None:
            channel.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["group", "sync"])
def test_every_acked_job_of_sequential_plain_batches_survives_kill_9(server_factory: ServerFactory,
                                                                    mode: str) -> None:
    """Sequential producers of plain batches (≤ 256 jobs: committed on the event loop by the
    lone-write path) beside plain single enqueues, SIGKILLed ×3: every acked job is there."""
    proc = server_factory(persist_mode=mode)
    with connect(proc.grpc_target) as s:  # the queue exists before the plain batches start
        s.batch([job(QUEUE, "plain", data=b"first")])
    stop = threading.Event()
    producers = [PlainProducer(0, 256, proc, stop), PlainProducer(1, 37, proc, stop),
                 PlainProducer(2, 2, proc, stop), PlainProducer(3, 1, proc, stop)]
    for p in producers:
        p.start()

    def acked() -> int:
        return sum(len(p.acked) for p in producers)

    rng = random.Random()
    try:
        for _ in range(KILLS):
            before, deadline = acked(), time.monotonic() + 30
            pause_until = time.monotonic() + rng.uniform(0.3, 0.8)
            while time.monotonic() < pause_until or acked() <= before + 300:
                assert time.monotonic() < deadline, "producers make no progress"
                time.sleep(0.01)
            proc.kill()
            proc.start()
        before = acked()
        while acked() <= before + 300:
            time.sleep(0.01)
    finally:
        stop.set()
        for p in producers:
            p.join(15)
    problems = [msg for p in producers for msg in p.problems]
    assert not problems, problems[:5]
    acked_ids = [job_id for p in producers for job_id in p.acked]
    with connect(proc.grpc_target) as s:
        delivered = Counter(j.id for j in s.reserve_all([QUEUE]))
    assert not [i for i, n in delivered.items() if n > 1], "jobs delivered twice"
    missing = set(acked_ids) - set(delivered)
    assert not missing, f"{len(missing)} of {len(acked_ids)} acked jobs lost after kill -9, e.g. {sorted(missing)[:3]}"
