"""What every log line says about the message being handled, for structured (JSON) logs.

A filter, so that any logger (the kernel's, a context's, a library's) gets the fields while a
worker handles a message: `correlation_id` (the story), `message_id`, `subscriber`,
`event_type`, and `trace_id` whenever a span is current (web requests included). `grep` for a
correlation id over the logs of every process then tells its whole story.

What the kernel says of a message it handles in a pack's shared transaction (its dead letter, its
retry, a stale or gapped event) is held back until that transaction's outcome stands (`holding_back`,
`say`): a pass rolled back decided nothing, and the pass done again says it once.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import trace

from outbox.core.envelope import Envelope

_message: ContextVar[tuple[str, Envelope] | None] = ContextVar("outbox_log_message", default=None)
_held_back: ContextVar[list[logging.LogRecord] | None] = ContextVar("outbox_log_held_back", default=None)

# The kernel's loggers whose lines say what became of a message: a letter, a retry, a stale event.
DECIDING = ("outbox.handling.dispatch", "outbox.handling.ordering", "outbox.core.dead_letters")


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
        if span.is_valid and getattr(record, "trace_id", None) is None:  # a line held back keeps its own
            record.trace_id = format(span.trace_id, "032x")
        return True


@contextmanager
def holding_back(lines: list[logging.LogRecord]) -> Iterator[None]:
    """The lines the kernel's DECIDING loggers log in the block go to `lines` instead, with what they
    say of their message, for the caller to `say` once what the block did is committed."""
    token = _held_back.set(lines)
    try:
        yield
    finally:
        _held_back.reset(token)


def say(lines: list[logging.LogRecord]) -> None:
    """Log the lines held back, as and where they would have been logged."""
    for record in lines:
        logging.getLogger(record.name).handle(record)


class _HoldingBack(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        lines = _held_back.get()
        if lines is None:
            return True
        MessageContext().filter(record)  # the message it is about, known now and no longer when said
        lines.append(record)
        return False


_holding_back = _HoldingBack()
for _name in DECIDING:
    logging.getLogger(_name).addFilter(_holding_back)
