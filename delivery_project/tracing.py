"""Turn tracing on from the standard OpenTelemetry variables; off by default.

OTEL_TRACES_EXPORTER  otlp | console | none (default), or several, comma-separated
OTEL_EXPORTER_OTLP_ENDPOINT  where otlp sends (OTLP over HTTP; Jaeger all-in-one listens on :4318)
OTEL_SERVICE_NAME  defaults to drone-delivery-web, -relay or -worker after the process's command
OTEL_CONSOLE_SPANS_FILE  where the console exporter appends its spans, one JSON object a line
    (default: stdout; log lines go to stderr, so the two never share a stream by default)

Every process configures itself at start-up (DeliveryProjectConfig.ready): web requests through
OpenTelemetry's Django instrumentation, relay and handlers through the kernel's own spans
(outbox/observability/tracing.py).
"""

import os
import sys

from django.core.exceptions import ImproperlyConfigured
from opentelemetry import trace


def _service_name() -> str:
    command = " ".join(sys.argv[:2])
    role = "relay" if "relay_outbox" in command else "worker" if "dramatiq" in command else "web"
    return os.environ.get("OTEL_SERVICE_NAME") or f"drone-delivery-{role}"


def _console_exporter(exporter_class):
    """One compact JSON object a line (the SDK's default is indented JSON over many lines)."""
    path = os.environ.get("OTEL_CONSOLE_SPANS_FILE")
    out = open(path, "a", buffering=1, encoding="utf-8") if path else sys.stdout  # noqa: SIM115 (the process's lifetime)
    return exporter_class(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")


def configure_tracing() -> bool:
    """Install the SDK with the exporters OTEL_TRACES_EXPORTER names; False when it names none."""
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    if not names or names == ["none"]:
        return False
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": _service_name()}))
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(_console_exporter(ConsoleSpanExporter)))
        else:
            raise ImproperlyConfigured(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp, console or none)")
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument()
    return True
