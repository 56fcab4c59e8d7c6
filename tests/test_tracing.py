"""One delivery, one trace tree: the POST that accepts it is the root, every event
of its timeline is a publish span in that trace, and each handler's span is the child of the
span that published the event it handles, across the real relay, broker and worker."""

import pytest
from django.test import Client
from django.utils import timezone
from opentelemetry import trace
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from drones.services import seed_fleet
from outbox.models import InboxMessage, OutboxMessage
from tests.factories import BASE, delivery_request
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

SPANS = InMemorySpanExporter()


@pytest.fixture
def tracing():
    """An SDK that keeps spans in memory (the global provider can be set once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(SPANS))
        trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument()
    SPANS.clear()
    yield SPANS
    DjangoInstrumentor().uninstrument()


def test_one_delivery_is_one_trace_from_the_post_through_every_handler(tracing, system):
    from tests.factories import Customer

    seed_fleet(count=2, latitude=BASE[0], longitude=BASE[1])
    alice = Customer("alice")
    client = Client(headers={"Authorization": f"Bearer {alice.token}"})

    delivery_id = client.post("/api/deliveryrequests", delivery_request(), content_type="application/json").json()[
        "deliveryId"
    ]
    wait_until(lambda: alice.get(f"/deliveries/{delivery_id}").json()["status"] == "delivered", what="delivered")

    def every_relayed_event_handled() -> int:
        relayed = OutboxMessage.objects.filter(correlation_id=delivery_id, published_at__isnull=False)
        expected = sum(len(row.recipients) for row in relayed)
        handled = InboxMessage.objects.filter(correlation_id=delivery_id).count()
        due = OutboxMessage.objects.filter(
            correlation_id=delivery_id, published_at__isnull=True, available_at__lte=timezone.now()
        )
        return handled if handled == expected and not due.exists() else 0

    handled = wait_until(every_relayed_event_handled, what="every relayed event to be handled")
    rows = list(OutboxMessage.objects.filter(correlation_id=delivery_id))

    delivery_messages = {str(row.message_id) for row in rows}

    def trace_of_delivery_complete():  # the delivery's handler spans, not another story's (a drone back at base)
        spans = tracing.get_finished_spans()
        ended = [s for s in spans if s.name.startswith("handle ") and s.attributes["message_id"] in delivery_messages]
        return len(ended) >= handled and spans

    spans = wait_until(trace_of_delivery_complete, what="every handler span to end")
    roots = [s for s in spans if s.parent is None and s.attributes.get("http.method", s.name).startswith("POST")]
    assert len(roots) == 1, [s.name for s in spans if s.parent is None]
    root = roots[0]
    in_trace = [s for s in spans if s.context.trace_id == root.context.trace_id]
    publishes = {s.attributes["message_id"]: s for s in in_trace if s.name.startswith("publish ")}
    handlers = [s for s in in_trace if s.name.startswith("handle ")]

    assert {str(row.message_id) for row in rows} <= set(publishes), "an event of the timeline has no span"
    requested = next(row for row in rows if row.type == "delivery.requested")
    assert publishes[str(requested.message_id)].parent.span_id == root.context.span_id
    assert len(handlers) >= handled
    print(f"{root.name}: {len(in_trace)} spans, {len(publishes)} events, {len(handlers)} handler runs")
    for span in handlers:
        publisher = publishes[span.attributes["message_id"]]
        assert span.parent.span_id == publisher.context.span_id, span.name
    relays = [s for s in in_trace if s.name.startswith("relay ")]
    assert {s.attributes["message_id"] for s in relays} >= {str(r.message_id) for r in rows if r.published_at}
    for row in rows:
        assert row.trace_context["traceparent"].split("-")[1] == format(root.context.trace_id, "032x")


@pytest.mark.django_db
def test_a_replayed_dead_letter_keeps_the_trace_of_the_event_it_carries():
    from django.utils import timezone as tz
    from outbox_tests.letters import envelope

    from outbox.console.dead_letter_actions import replay_dead_letter
    from outbox.models import DeadLetter

    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    body = {**envelope(), "traceparent": traceparent}
    letter = DeadLetter.objects.create(
        subscriber="probe_b",
        message_id=body["message_id"],
        type=body["type"],
        correlation_id=body["correlation_id"],
        envelope=body,
        reason="handler_error",
        attempts=1,
        first_failed_at=tz.now(),
        last_failed_at=tz.now(),
    )

    row = replay_dead_letter(letter_id=letter.pk, by="operator")

    assert row.trace_context == {"traceparent": traceparent}
    assert row.envelope()["traceparent"] == traceparent


def test_a_trace_context_that_does_not_fit_is_dropped_not_a_reason_to_refuse_the_message():
    from outbox_tests.letters import envelope

    from outbox.core.envelope import Envelope

    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    body = {**envelope(), "traceparent": traceparent, "tracestate": "vendor=" + "x" * 600}

    read = Envelope.model_validate(body)

    assert (read.traceparent, read.tracestate) == (traceparent, None)
    assert Envelope.model_validate({**envelope(), "traceparent": 7}).traceparent is None
