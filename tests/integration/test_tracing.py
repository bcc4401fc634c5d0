"""OpenTelemetry tracing of enqueues and job runs against a real server.

Each test records into its own SDK ``TracerProvider`` with an ``InMemorySpanExporter``, given
to the ``Client`` / ``AsyncClient`` / ``Worker`` as ``tracer_provider=`` (the global provider
can be set only once per process and would trace every later test). The last test runs a
fresh interpreter in which ``opentelemetry`` cannot be imported and checks that enqueue and a
worker still work and that nothing of it was imported.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from support.servers import module_server
from support.worker import fast_queue, running, until

from sepp import AsyncClient, Client, EnqueueRequest, Payload, chain
from sepp.errors import AtomicEnqueueError, RejectedError
from sepp.testing import ServerProcess
from sepp.worker import Job, JobReport, Retry, Worker

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.sqlite_only(reason=(
        "backend-neutral: spans are made by the clients, the servicers and the Worker, not the "
        "store")),
]

#: A caller's own W3C trace context (the example of the W3C recommendation).
CALLER_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def traced_server(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module: short, jitter-free backoff; each test on its ``fresh_queue``."""
    yield from module_server(tmp_path_factory, backend, queue_defaults=fast_queue(retry_base=0.05, retry_cap=0.1))


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider of the test's own, exporting each ended span into memory at once."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name``, in the order they ended."""
    return [s for s in exporter.get_finished_spans() if s.name == name]


def ids_of(traceparent: str) -> tuple[int, int]:
    """(trace id, parent span id) of a W3C ``traceparent`` (its flags aside)."""
    version, trace_id, span_id, _flags = traceparent.split("-")
    assert version == "00"
    return int(trace_id, 16), int(span_id, 16)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})




def run_jobs(server: ServerProcess, queue: str, provider: TracerProvider, count: int,
             handler: Callable[[Job], Any]) -> list[JobReport]:
    """Run a worker on ``queue`` until ``count`` outcomes are settled; their reports."""
    reports: list[JobReport] = []

    async def main() -> None:
        worker = Worker(server.grpc_target, [queue], poll_wait=0.2, tracer_provider=provider)
        worker.register("t", handler)
        worker.on_outcome(reports.append)
        async with running(worker):
            await until(lambda: len(reports) >= count)

    asyncio.run(main())
    return reports


# ---------------------------------------------------------------------- producer


def test_an_enqueue_records_a_producer_span_whose_context_the_job_carries(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with Client(traced_server.grpc_target, tracer_provider=provider) as client:
        request = EnqueueRequest(fresh_queue, "t", payload=Payload(b"x"))
        ack = client.enqueue(request)
    (send,) = named(exporter, f"send {fresh_queue}")
    assert send.kind is SpanKind.PRODUCER
    assert attrs(send) == {"messaging.system": "sepp", "messaging.destination.name": fresh_queue,
                           "messaging.operation.name": "send", "messaging.operation.type": "send",
                           "messaging.message.id": ack.job_id, "sepp.job.type": "t"}
    assert send.status.status_code is StatusCode.UNSET
    assert request.trace_context == {}  # the request is not changed: the sent message carries it
    seen: list[Job] = []
    run_jobs(traced_server, fresh_queue, provider, 1, seen.append)
    ctx = send.context
    assert ctx is not None
    assert ids_of(seen[0].trace_context["traceparent"]) == (ctx.trace_id, ctx.span_id)


def test_a_refused_enqueue_ends_its_span_with_an_error(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with Client(traced_server.grpc_target, tracer_provider=provider) as client, pytest.raises(RejectedError):
        client.enqueue(EnqueueRequest(fresh_queue, "t", priority=10))
    (send,) = named(exporter, f"send {fresh_queue}")
    assert send.status.status_code is StatusCode.ERROR
    assert attrs(send)["error.type"] == "InvalidArgument"
    assert "messaging.message.id" not in attrs(send)


def test_a_batch_records_a_create_span_per_job_and_one_send_span_linking_them(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    given = EnqueueRequest(fresh_queue, "t", trace_context={"traceparent": CALLER_TRACEPARENT})
    reqs = [EnqueueRequest(fresh_queue, "t"), EnqueueRequest(fresh_queue, "t", priority=10), given]
    with Client(traced_server.grpc_target, tracer_provider=provider) as client:
        results = client.enqueue_batch(reqs)
    creates = named(exporter, f"create {fresh_queue}")
    (send,) = named(exporter, f"send {fresh_queue}")
    assert len(creates) == 2  # the job with the caller's context gets none
    assert all(c.kind is SpanKind.PRODUCER for c in creates)
    assert send.kind is SpanKind.CLIENT
    assert attrs(send)["messaging.batch.message_count"] == 3
    assert attrs(send)["sepp.batch.rejected"] == 1
    ok, bad = sorted(creates, key=lambda c: c.status.status_code is StatusCode.ERROR)
    assert attrs(ok)["messaging.message.id"] == results[0].job_id  # type: ignore[union-attr]
    assert attrs(ok)["messaging.operation.type"] == "create"
    assert bad.status.status_code is StatusCode.ERROR and "messaging.message.id" not in attrs(bad)
    assert attrs(bad)["error.type"] == "InvalidArgument"
    linked = {(link.context.trace_id, link.context.span_id) for link in send.links}
    assert linked == {(c.context.trace_id, c.context.span_id) for c in creates} | {
        (0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7)}
    seen: list[Job] = []
    run_jobs(traced_server, fresh_queue, provider, 2, seen.append)
    by_id = {job.id: job.trace_context.get("traceparent") for job in seen}
    assert by_id[results[2].job_id] == CALLER_TRACEPARENT  # type: ignore[union-attr]
    assert ids_of(by_id[results[0].job_id] or "") == (ok.context.trace_id, ok.context.span_id)  # type: ignore[union-attr]


def test_a_workflow_records_a_create_span_per_node_whose_context_the_job_carries(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with Client(traced_server.grpc_target, tracer_provider=provider) as client:
        ack = client.enqueue_workflow(chain(EnqueueRequest(fresh_queue, "t"), EnqueueRequest(fresh_queue, "t")))
        with pytest.raises(AtomicEnqueueError):  # refused locally: every span ends with an error
            client.enqueue_workflow(chain(EnqueueRequest(fresh_queue, "t"), EnqueueRequest(fresh_queue, "t",
                                                                                           priority=10)))
    creates = named(exporter, f"create {fresh_queue}")
    sends = named(exporter, f"send {fresh_queue}")
    assert len(creates) == 4 and len(sends) == 2
    ok = [c for c in creates if c.status.status_code is StatusCode.UNSET]
    assert [attrs(c)["messaging.message.id"] for c in ok] == [a.job_id for a in ack.acks]
    assert attrs(sends[0])["messaging.batch.message_count"] == 2
    assert sends[1].status.status_code is StatusCode.ERROR
    assert all(c.status.status_code is StatusCode.ERROR for c in creates if c not in ok)
    seen: list[Job] = []
    run_jobs(traced_server, fresh_queue, provider, 2, seen.append)
    by_id = {job.id: job.trace_context.get("traceparent") for job in seen}
    first = ok[0].context
    assert first is not None
    assert ids_of(by_id[ack.acks[0].job_id] or "") == (first.trace_id, first.span_id)


def test_a_caller_given_trace_context_is_kept_on_a_single_enqueue(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    state = "vendor=abc"
    with Client(traced_server.grpc_target, tracer_provider=provider) as client:
        client.enqueue(EnqueueRequest(fresh_queue, "t",
                                      trace_context={"traceparent": CALLER_TRACEPARENT, "tracestate": state}))
    (send,) = named(exporter, f"send {fresh_queue}")
    assert [(link.context.trace_id, link.context.span_id) for link in send.links] == [
        (0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7)]
    seen: list[Job] = []
    run_jobs(traced_server, fresh_queue, provider, 1, seen.append)
    assert dict(seen[0].trace_context) == {"traceparent": CALLER_TRACEPARENT, "tracestate": state}


def test_the_producer_span_is_a_child_of_the_callers_current_span(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("test")

    async def main() -> None:
        async with AsyncClient(traced_server.grpc_target, tracer_provider=provider) as client:
            with tracer.start_as_current_span("checkout"):
                await client.enqueue(EnqueueRequest(fresh_queue, "t"))
                await client.enqueue_atomic([EnqueueRequest(fresh_queue, "t")])

    asyncio.run(main())
    (checkout,) = named(exporter, "checkout")
    single, batch = named(exporter, f"send {fresh_queue}")
    (create,) = named(exporter, f"create {fresh_queue}")
    for span in (single, batch, create):
        assert span.parent is not None and span.parent.span_id == checkout.context.span_id
        assert span.context.trace_id == checkout.context.trace_id


# ---------------------------------------------------------------------- consumer


def test_the_first_prompt_delivery_runs_in_a_child_of_the_producer_span(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with Client(traced_server.grpc_target, tracer_provider=provider) as client:
        ack = client.enqueue(EnqueueRequest(fresh_queue, "t"))
    inner = provider.get_tracer("handler")

    def handler(job: Job) -> None:  # a blocking handler: it runs in a thread with the span's context
        with inner.start_as_current_span("send mail"):
            pass

    run_jobs(traced_server, fresh_queue, provider, 1, handler)
    (send,) = named(exporter, f"send {fresh_queue}")
    (process,) = named(exporter, f"process {fresh_queue}")
    (mail,) = named(exporter, "send mail")
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == send.context.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert not process.links
    assert attrs(process) == {"messaging.system": "sepp", "messaging.destination.name": fresh_queue,
                              "messaging.operation.name": "process", "messaging.operation.type": "process",
                              "messaging.message.id": ack.job_id, "sepp.job.type": "t", "sepp.job.attempt": 1,
                              "sepp.job.outcome": "completed"}
    assert process.status.status_code is StatusCode.UNSET
    assert mail.parent is not None and mail.parent.span_id == process.context.span_id


def test_a_retry_runs_in_a_new_trace_linked_to_the_producer_span(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with Client(traced_server.grpc_target, tracer_provider=provider) as client:
        client.enqueue(EnqueueRequest(fresh_queue, "t", max_attempts=3))

    async def handler(job: Job) -> None:
        if job.attempt == 1:
            raise Retry(after=0.0)
        if job.attempt == 2:
            raise ValueError("still broken")

    reports = run_jobs(traced_server, fresh_queue, provider, 3, handler)
    assert [r.outcome for r in reports] == ["retry_after", "retry", "completed"]
    (send,) = named(exporter, f"send {fresh_queue}")
    first, second, third = sorted(named(exporter, f"process {fresh_queue}"), key=lambda s: attrs(s)["sepp.job.attempt"])
    assert first.parent is not None and first.parent.span_id == send.context.span_id
    assert first.status.status_code is StatusCode.ERROR and attrs(first)["sepp.job.outcome"] == "retry_after"
    for retry in (second, third):
        assert retry.parent is None and retry.context.trace_id != send.context.trace_id
        assert [(link.context.trace_id, link.context.span_id) for link in retry.links] == [
            (send.context.trace_id, send.context.span_id)]
    assert attrs(second)["sepp.job.attempt"] == 2
    assert second.status.status_code is StatusCode.ERROR and attrs(second)["error.type"] == "ValueError"
    assert [e.name for e in second.events] == ["exception"]
    assert second.events[0].attributes is not None
    assert second.events[0].attributes["exception.message"] == "still broken"
    assert third.status.status_code is StatusCode.UNSET


def test_a_scheduled_job_runs_in_a_new_trace_linked_to_the_producer_span(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with Client(traced_server.grpc_target, tracer_provider=provider) as client:
        client.enqueue(EnqueueRequest(fresh_queue, "t").with_delay(dt.timedelta(seconds=0.2)))
    reports = run_jobs(traced_server, fresh_queue, provider, 1, lambda job: None)
    assert reports[0].job.attempt == 1  # a first delivery, but not a prompt one
    (send,) = named(exporter, f"send {fresh_queue}")
    (process,) = named(exporter, f"process {fresh_queue}")
    assert process.parent is None and process.context.trace_id != send.context.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in process.links] == [
        (send.context.trace_id, send.context.span_id)]


def test_a_job_enqueued_without_tracing_runs_in_a_root_span_without_links(
        traced_server: ServerProcess, fresh_queue: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with Client(traced_server.grpc_target) as client:  # no provider: nothing recorded, no context sent
        client.enqueue(EnqueueRequest(fresh_queue, "t"))
    reports = run_jobs(traced_server, fresh_queue, provider, 1, lambda job: None)
    assert reports[0].job.trace_context == {}
    (process,) = exporter.get_finished_spans()
    assert process.name == f"process {fresh_queue}" and process.parent is None and not process.links


# ---------------------------------------------------------------------- without OpenTelemetry

_NO_OTEL = r"""
import asyncio, json, sys
sys.modules["opentelemetry"] = None  # `import opentelemetry...` now raises ImportError
from sepp import Client, EnqueueRequest
from sepp.worker import Worker

target, queue = sys.argv[1], sys.argv[2]
with Client(target) as client:
    ack = client.enqueue(EnqueueRequest(queue, "t"))
    batch = client.enqueue_batch([EnqueueRequest(queue, "t"), EnqueueRequest(queue, "t")])
done = []

async def main():
    worker = Worker(target, [queue], poll_wait=0.2)
    worker.register("t", lambda job: done.append(job.id))
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    for _ in range(500):
        if len(done) == 3:
            break
        await asyncio.sleep(0.01)
    await worker.stop(5.0)
    await task

asyncio.run(main())
loaded = sorted(name for name, mod in sys.modules.items() if name.startswith("opentelemetry") and mod is not None)
print(json.dumps({"done": sorted(done), "ids": sorted([ack.job_id] + [r.job_id for r in batch]),
                  "loaded": loaded}))
"""


def test_without_opentelemetry_enqueue_and_a_worker_work_and_nothing_of_it_is_imported(
        traced_server: ServerProcess, fresh_queue: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _NO_OTEL, traced_server.grpc_target, fresh_queue], env=env,
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["done"] == result["ids"] and len(result["ids"]) == 3
    assert result["loaded"] == []
