"""Distributed tracing with OpenTelemetry: one story, one trace tree.

The kernel uses only the OpenTelemetry API, which does nothing until a process configures the
SDK (the project's own wiring, from the standard OTEL_* variables). `publish()` is a span
and writes its W3C trace context (`traceparent`, `tracestate`) into the envelope; the relay's
send and each handler are spans whose parent is that publishing span, so the chain of events
across web, relay and worker processes reads as one tree, delayed events and replays included.
"""

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind

tracer = trace.get_tracer("outbox")


# W3C bounds: a traceparent is 55 characters; a tracestate that a client sent may be long, and
# a trace's vendor notes are not worth a message (it travels without them).
LIMITS = {"traceparent": 55, "tracestate": 512}


def active() -> bool:
    """Whether this process records traces: with the SDK off, publish and dispatch skip spans."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def trace_context() -> dict[str, str]:
    """The current span's W3C trace context, to travel in an envelope ({} when not tracing)."""
    if not active():
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {key: value for key, value in carrier.items() if key in LIMITS and len(value) <= LIMITS[key]}


@contextmanager
def publishing(event_type: str, *, new_story: bool, attributes: dict) -> Iterator[Span | None]:
    """The span of one publish. An event that starts another story (a resource freed by one story
    takes the next) starts a trace of its own, linked to the span that caused it."""
    if not active():
        yield None
        return
    if new_story and trace.get_current_span().get_span_context().is_valid:
        cause = trace.get_current_span().get_span_context()
        span = tracer.start_as_current_span(
            f"publish {event_type}",
            context=otel_context.Context(),
            kind=SpanKind.PRODUCER,
            links=[Link(cause)],
            attributes=attributes,
        )
    else:
        span = tracer.start_as_current_span(f"publish {event_type}", kind=SpanKind.PRODUCER, attributes=attributes)
    with span as current:
        yield current


@contextmanager
def following(carrier: dict, name: str, *, kind: SpanKind, attributes: dict) -> Iterator[Span | None]:
    """A span whose parent is the one that published the event (its trace context in `carrier`)."""
    if not active():
        yield None
        return
    parent = propagate.extract({key: carrier[key] for key in LIMITS if carrier.get(key)})
    with tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as span:
        yield span


def relaying(carrier: dict, *, event_type: str, message_id) -> contextlib.AbstractContextManager:
    """The relay's span of a row, child of its publishing span; none when the row was not traced."""
    if not carrier:
        return contextlib.nullcontext()
    attributes = {"message_id": str(message_id), "messaging.event_type": event_type}
    return following(carrier, f"relay {event_type}", kind=SpanKind.PRODUCER, attributes=attributes)
