"""The Python client's own cost per job (issue 15 item 3), without a server or a network.

Times each step ``Client.enqueue_batch`` takes for a batch of 256 jobs like the peer harness
sends (``{"i": n}`` JSON payloads), and prints a Markdown table of µs per job:

* build: ``EnqueueRequest(queue, job_type, payload=Payload.json(...))``
* to_proto: the wire ``EnqueueRequest`` (``_core.to_protos``)
* validate: the local verdicts against the advertised limits (``_core.validate_all``)
* serialize: the ``EnqueueBatchRequest`` as bytes (what gRPC does before sending)
* results: an ``EnqueueBatchResponse`` parsed and merged into ``EnqueueAck``s
* Client.enqueue_batch: the whole call of a blocking ``Client`` on fresh requests (its lean
  batch path, the tracing gate, merge), its gRPC call answered in-process from a prepared
  response: the client's CPU per job without the network (not part of the total)

``--otel off`` (default) leaves OpenTelemetry unimported; ``--otel noop`` imports
``opentelemetry.trace`` with no tracer provider set; ``--otel sdk`` records every span with the
SDK's ``BatchSpanProcessor`` into an exporter that drops them (issue 11 "Tracing": the first
two must cost the same).

    python benchmarks/client_cost.py [--batch 256] [--rounds 200] [--otel off|noop|sdk]
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

from _harness import table

from sepp import Client, EnqueueRequest, Payload
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _core


def _info() -> _core.CachedInfo:
    """What a default server advertises (the same ``server_info`` the server builds)."""
    from sepp.server.config import ServerConfig
    from sepp.server.notifier import Notifier
    from sepp.server.parts import ServerParts
    from sepp.server.queues import QueueRegistry
    from sepp.server.rpc.producer import server_info

    config = ServerConfig()
    parts = ServerParts.build(config, None, QueueRegistry(config.queue_defaults, config.strict),  # type: ignore[arg-type]
                              Notifier())
    return _core.CachedInfo.build(server_info(parts, time.monotonic(), "bench"))


def _best(fn: Callable[[], object], rounds: int) -> float:
    """Fastest of ``rounds`` runs of ``fn``, seconds (the least disturbed by the shared cores)."""
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _otel(mode: str) -> object | None:
    """The tracer provider ``--otel`` asks for (``None``: sepp's default, the global one)."""
    if mode == "off":
        return None
    import opentelemetry.trace  # noqa: F401  (imported, no provider set: "noop")

    if mode == "noop":
        return None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class _Drop(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=1 << 20))
    return provider


def _stubbed_client(cached: _core.CachedInfo, answer: bytes, provider: object | None) -> Client:
    """A ``Client`` whose ``EnqueueBatch`` is answered in-process with ``answer`` (serialized),
    read as the real stub reads it (``_core.parse_batch_response``, where it exists), its request
    serialized as the real stub does (``_core.serialize_batch_request``, where it exists)."""
    parse = getattr(_core, "parse_batch_response", ppb.EnqueueBatchResponse.FromString)
    serialize = getattr(_core, "serialize_batch_request", ppb.EnqueueBatchRequest.SerializeToString)
    client = Client("127.0.0.1:1", tracer_provider=provider)
    client._cached = cached

    class _Stub:
        def EnqueueBatch(self, request: ppb.EnqueueBatchRequest | bytes, **_: object) -> ppb.EnqueueBatchResponse:
            serialize(request)  # type: ignore[arg-type]  # what gRPC does before sending (the stub's request serializer)
            return parse(answer)

    client._stub = _Stub()
    return client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--otel", choices=("off", "noop", "sdk"), default="off")
    args = parser.parse_args()
    n = args.batch
    cached = _info()
    provider = _otel(args.otel)

    def build() -> list[EnqueueRequest]:
        return [EnqueueRequest("bench", "noop", payload=Payload.json({"i": i})) for i in range(n)]

    reqs = build()
    response = ppb.EnqueueBatchResponse()
    for _ in range(n):
        response.results.add().ack.job_id = str(uuid.uuid4())
    answer = response.SerializeToString()
    parse = getattr(_core, "parse_batch_response", ppb.EnqueueBatchResponse.FromString)

    def to_proto() -> object:
        return _core.to_protos(build())  # fresh requests: a built proto is kept on its request

    steps: list[tuple[str, Callable[[], object]]] = [
        ("build EnqueueRequest + Payload.json", build),
        ("to_proto (fresh requests, minus build)", to_proto),
        ("validate locally", lambda: _core.validate_all(cached, _core.to_protos(reqs))),
        ("serialize EnqueueBatchRequest", lambda: ppb.EnqueueBatchRequest(jobs=_core.to_protos(reqs))
         .SerializeToString()),
        ("parse + merge results", lambda: _core.merge_batch([None] * n, parse(answer))),
    ]
    times = {name: _best(fn, args.rounds) / n * 1e6 for name, fn in steps}
    times["to_proto (fresh requests, minus build)"] -= times["build EnqueueRequest + Payload.json"]
    rows = [[name, f"{us:.2f}"] for name, us in times.items()]
    rows.append(["total per job", f"{sum(times.values()):.2f}"])
    client = _stubbed_client(cached, answer, provider)
    call = _best(lambda: client.enqueue_batch(build()), args.rounds) / n * 1e6
    rows.append([f"Client.enqueue_batch, no network, minus build (otel {args.otel})",
                 f"{call - times['build EnqueueRequest + Payload.json']:.2f}"])
    print(table([f"step (batch of {n})", "µs per job"], rows))


if __name__ == "__main__":
    main()
