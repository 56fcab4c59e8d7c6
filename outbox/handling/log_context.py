"""What every log line says about the message being handled, for structured (JSON) logs.

A filter, so that any logger (the kernel's, a context's, a library's) gets the fields while a
worker handles a message: `correlation_id` (the story), `message_id`, `subscriber`,
`event_type`, and `trace_id` whenever a span is current (web requests included). `grep` for a
correlation id over the logs of every process then tells its whole story.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import trace

from outbox.core.envelope import Envelope

_message: ContextVar[tuple[str, Envelope] | None] = ContextVar("outbox_log_message", default=None)


@contextmanager
def about(subscriber: str, envelope: Envelope) -> Iterator[None]:
    token = _message.set((subscriber, envelope))
    try:
        yield
    finally:
        _message.reset(token)


class MessageContext(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        current = _message.get()
        if current is not None:
            subscriber, envelope = current
            record.subscriber, record.event_type = subscriber, envelope.type
            record.correlation_id, record.message_id = str(envelope.correlation_id), str(envelope.message_id)
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            record.trace_id = format(span.trace_id, "032x")
        return True
