"""sepp's OpenTelemetry spans; imported only through :mod:`sepp.tracing`.

This module imports ``opentelemetry`` (the ``otel`` extra) and is loaded only once
:func:`sepp.tracing.tracer` found a tracer provider to record with. It follows the messaging
semantic conventions as published by ``opentelemetry-semantic-conventions`` 0.66b2 (span name
``{messaging.operation.name} {messaging.destination.name}``, ``messaging.operation.type``):

* ``Client.enqueue`` / ``AsyncClient.enqueue``: one ``send <queue>`` span, kind PRODUCER,
  child of the caller's current span; its context is the job's creation context.
* ``enqueue_batch`` / ``enqueue_atomic`` / ``enqueue_workflow`` (and so ``enqueue_many``,
  batch by batch): one ``create <queue>`` span, kind PRODUCER, per job (each job's own
  creation context), and one ``send <queue>`` span for the call (kind CLIENT, or PRODUCER when no job got a create span)
  with ``messaging.batch.message_count`` and a link to every job's creation context. Mixed
  queues name it plain ``send``.
* A job without ``trace_context`` gets its creation context written into the sent message
  (W3C ``traceparent``, and ``tracestate`` when it fits the default 512-byte ``max_trace_value_bytes``); the
  ``EnqueueRequest`` itself is not changed. A job whose caller gave ``trace_context`` keeps it
  untouched and gets no create span: the caller's context is its creation context.
* ``Worker``: one ``process <queue>`` span, kind CONSUMER, per job run, the handler inside it.
  On the first prompt delivery (``attempt`` 1, no earlier attempt in its history, not
  scheduled: ``run_at`` = ``enqueued_at``) it is a child of the job's creation context; a
  retry, a redelivery (released, lease expired, redriven) and a scheduled job start a new
  trace with a link to the creation context instead.

Attributes: ``messaging.system = "sepp"``, ``messaging.destination.name`` (queue),
``messaging.message.id`` (job id; set from the answer on producer spans),
``messaging.operation.name`` / ``messaging.operation.type`` (``send``, ``create``,
``process``), ``sepp.job.type``; on process spans ``sepp.job.attempt`` (this delivery's
number, 1-based) and ``sepp.job.outcome``; ``sepp.job.deduplicated`` on a deduplicated
enqueue. A failure sets status ERROR and ``error.type`` (the rejection's catalogue name, or the
exception's class); a handler's exception is recorded as a span event.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sepp._version import __version__

if TYPE_CHECKING:
    from sepp.request import BatchResult, EnqueueAck, EnqueueRequest
    from sepp.worker.job import Job

SYSTEM = "sepp"
#: The longest trace-context value the server accepts (beyond it: ``TraceContextInvalid``), bytes.
MAX_TRACE_VALUE = 512

_W3C = TraceContextTextMapPropagator()
_ROOT = otel_context.Context()


def make_tracer(provider: Any) -> SeppTracer:
    """A :class:`SeppTracer` recording with ``provider``'s tracer named ``sepp``."""
    return SeppTracer(provider.get_tracer("sepp", __version__))


def _carrier(ctx: otel_context.Context) -> dict[str, str]:
    """The W3C ``traceparent`` (and ``tracestate`` when ≤ 512 bytes) of ``ctx``'s span."""
    out: dict[str, str] = {}
    _W3C.inject(out, context=ctx)
    state = out.get("tracestate")
    if state is not None and len(state.encode()) > MAX_TRACE_VALUE:
        del out["tracestate"]
    return out


def _error_type(exc: BaseException) -> str:
    """``error.type`` of a failed call: the catalogue name of a ``RejectedError``'s code
    (e.g. ``PayloadTooLarge``), else the exception's class name."""
    rejection = getattr(exc, "rejection", None)
    code = getattr(rejection, "code", None)
    return str(getattr(code, "value", "")) or type(exc).__name__


def _fail(span: trace.Span, error_type: str, message: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, message))


class Send:
    """The spans of one enqueue call (see the module docstring); made by
    :meth:`SeppTracer.send`. ``carriers`` holds, per request, the trace context to write into
    its message, or ``None`` where the caller gave its own."""

    __slots__ = ("_creates", "_send", "carriers")

    def __init__(self, tracer: trace.Tracer, requests: Sequence[EnqueueRequest], batch: bool) -> None:
        queues = {r.queue for r in requests}
        queue = next(iter(queues)) if len(queues) == 1 else ""
        self._creates: list[trace.Span | None] = []
        self.carriers: list[dict[str, str] | None] = []
        if not batch:
            req = requests[0]
            links = _links([req.trace_context]) if req.trace_context else []
            self._send = tracer.start_span(f"send {req.queue}", kind=SpanKind.PRODUCER, links=links,
                                           attributes=_attributes("send", req.queue, req.job_type))
            ctx = trace.set_span_in_context(self._send)
            self.carriers.append(None if req.trace_context else _carrier(ctx))
            return
        links = []
        for req in requests:
            if req.trace_context:
                self._creates.append(None)
                self.carriers.append(None)
                links.extend(_links([req.trace_context]))
                continue
            span = tracer.start_span(f"create {req.queue}", kind=SpanKind.PRODUCER,
                                     attributes=_attributes("create", req.queue, req.job_type))
            self._creates.append(span)
            self.carriers.append(_carrier(trace.set_span_in_context(span)))
            links.append(Link(span.get_span_context()))
        kind = SpanKind.CLIENT if any(s is not None for s in self._creates) else SpanKind.PRODUCER
        attributes = _attributes("send", queue, "")
        attributes["messaging.batch.message_count"] = len(requests)
        self._send = tracer.start_span(f"send {queue}".rstrip(), kind=kind, links=links, attributes=attributes)

    def sent(self, verdicts: Sequence[object | None]) -> list[dict[str, str] | None]:
        """The carriers of the requests whose local verdict is ``None`` (the ones sent), in order."""
        return [c for c, v in zip(self.carriers, verdicts, strict=True) if v is None]

    def done(self, results: Sequence[BatchResult | EnqueueAck]) -> None:
        """End every span with the call's results (one per request, in order): an ack sets
        ``messaging.message.id`` (and ``sepp.job.deduplicated``), a rejection status ERROR."""
        from sepp.request import EnqueueAck

        if not self._creates:  # a single enqueue: its send span is the job's
            result = results[0]
            if isinstance(result, EnqueueAck):
                _acked(self._send, result)
            self._send.end()
            return
        failed = 0
        for span, result in zip(self._creates, results, strict=True):
            if isinstance(result, EnqueueAck):
                if span is not None:
                    _acked(span, result)
            else:
                failed += 1
                if span is not None:
                    code = getattr(result, "code", None)
                    _fail(span, str(getattr(code, "value", "Rejected")), str(result))
            if span is not None:
                span.end()
        if failed:
            self._send.set_attribute("sepp.batch.rejected", failed)
        self._send.end()

    def fail(self, exc: BaseException) -> None:
        """End every span with status ERROR: the call raised ``exc`` (a rejection of the
        whole call, an atomic batch refused, or no verdict at all)."""
        error_type, message = _error_type(exc), str(exc)
        for span in (*self._creates, self._send):
            if span is not None:
                _fail(span, error_type, message)
                span.end()


def _attributes(operation: str, queue: str, job_type: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.name": operation,
                                  "messaging.operation.type": operation}
    if queue:
        attributes["messaging.destination.name"] = queue
    if job_type:
        attributes["sepp.job.type"] = job_type
    return attributes


def _acked(span: trace.Span, ack: EnqueueAck) -> None:
    span.set_attribute("messaging.message.id", ack.job_id)
    if ack.deduplicated:
        span.set_attribute("sepp.job.deduplicated", True)


def _links(contexts: Sequence[Mapping[str, str]]) -> list[Link]:
    """A link to every valid W3C context among ``contexts``."""
    links = []
    for carrier in contexts:
        span_context = trace.get_current_span(_W3C.extract(carrier, context=_ROOT)).get_span_context()
        if span_context.is_valid:
            links.append(Link(span_context))
    return links


class SeppTracer:
    """An OpenTelemetry ``Tracer`` with sepp's two kinds of spans: :meth:`send` for an
    enqueue call, :meth:`process` for a job run (see the module docstring)."""

    __slots__ = ("tracer",)

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def send(self, requests: Sequence[EnqueueRequest], *, batch: bool) -> Send:
        """Start the spans of one enqueue call of ``requests`` (``batch``: a batch call)."""
        return Send(self.tracer, requests, batch)

    @contextmanager
    def process(self, job: Job) -> Iterator[Process]:
        """Run the body inside the ``process <queue>`` span of ``job``: the span is current
        (a handler's own spans are its children; a blocking handler's thread gets the same
        context) and ends on exit. The body reports how the job went with
        :meth:`Process.outcome`."""
        raw = job.reservation.job
        parent = _W3C.extract(job.trace_context, context=_ROOT) if raw.trace_context else _ROOT
        creation = trace.get_current_span(parent).get_span_context()
        prompt = (job.attempt == 1 and not raw.attempts
                  and (raw.run_at.seconds, raw.run_at.nanos) <= (raw.enqueued_at.seconds, raw.enqueued_at.nanos))
        attributes = _attributes("process", job.queue, job.job_type)
        attributes["messaging.message.id"] = job.id
        attributes["sepp.job.attempt"] = job.attempt
        if prompt or not creation.is_valid:
            span = self.tracer.start_span(f"process {job.queue}", parent, kind=SpanKind.CONSUMER,
                                          attributes=attributes)
        else:
            span = self.tracer.start_span(f"process {job.queue}", _ROOT, kind=SpanKind.CONSUMER,
                                          attributes=attributes, links=[Link(creation)])
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield Process(span)
        finally:
            otel_context.detach(token)
            span.end()


class Process:
    """The span of one job run, as the worker runtime reports into it."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def outcome(self, kind: str, error: BaseException | None, message: str) -> None:
        """Record the outcome (``sepp.job.outcome``: completed, retry, retry_after,
        dead_letter, released); a handler's exception ``error`` is recorded as an event and,
        like any outcome but completed and released, sets status ERROR."""
        self.span.set_attribute("sepp.job.outcome", kind)
        if error is not None:
            self.span.record_exception(error)
        if kind not in ("completed", "released"):
            _fail(self.span, type(error).__name__ if error is not None else kind, message)


__all__ = ["MAX_TRACE_VALUE", "SYSTEM", "Process", "Send", "SeppTracer", "make_tracer"]
