"""How the relay hands a batch to the broker: every copy confirmed, many copies in flight at once.

Dramatiq's `enqueue` waits for each publisher confirm in turn; this keeps up to `window` messages
in flight on a channel of its own in confirm mode, written through its non-blocking layer, and
collects the acks and nacks by delivery tag, so a batch costs about one round trip. It sends what
`enqueue` would (the same queue, message and properties), so Dramatiq's workers read it unchanged.
A row counts as sent only when every copy of it was acked. Bookkeeping is per copy, by its
delivery tag, never by message id (every copy shares its event's id); a refused key is handed back once
every copy of it is confirmed, naming each queue that took one. Tags belong to one channel: when
it closes, every copy unconfirmed on it is lost.
"""

import logging
from collections.abc import Hashable
from dataclasses import dataclass, field

import dramatiq

logger = logging.getLogger(__name__)

CONFIRM_TIMEOUT_SECONDS = 30.0
FLUSH_EVERY = 100


@dataclass
class Outcome:
    """What became of a batch: keys whose every copy the broker confirmed, keys it refused
    (nack or return), and the error that cut the batch short, if any."""

    confirmed: set[Hashable] = field(default_factory=set)
    refused: set[Hashable] = field(default_factory=set)
    error: Exception | None = None
    # Of a refused key, the queues whose copy the broker did take (acked): they need nothing more.
    acked: dict[Hashable, set[str]] = field(default_factory=dict)
    # Of a refused key, the queues whose copy came back unroutable (the queue is missing, or its
    # node is down): the queue's outage, not the row's fault.
    unroutable: dict[Hashable, set[str]] = field(default_factory=dict)


def with_enqueue_hooks(broker: dramatiq.Broker) -> bool:
    """Whether any of the broker's middleware does something before or after an enqueue: if none does, the relay
    skips the two hook calls Dramatiq makes for every message, which cost real CPU at thousands of copies a second.
    Asked again for every batch, so middleware added later is honoured from the next one."""
    base = dramatiq.Middleware
    return any(
        type(middleware).before_enqueue is not base.before_enqueue
        or type(middleware).after_enqueue is not base.after_enqueue
        for middleware in broker.middleware
    )
