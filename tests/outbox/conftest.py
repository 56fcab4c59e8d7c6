import uuid

import pytest
from django.utils import timezone

from outbox.subscriptions import message_to


def envelope(**overrides) -> dict:
    """A well-formed probe.pinged envelope, as the relay would send it."""
    body = {
        "message_id": str(uuid.uuid4()),
        "type": "probe.pinged",
        "version": 1,
        "occurred_at": timezone.now().isoformat(),
        "correlation_id": str(uuid.uuid4()),
        "causation_id": None,
        "stream": "ping:test",
        "sequence": 1,
        "hops": 0,
        "payload": {"n": 1, "fail": {}},
    }
    return {**body, **overrides}


@pytest.fixture
def deliver(broker):
    """Put an envelope straight on one subscriber's queue, bypassing the relay."""

    def deliver(subscriber: str, body: dict) -> None:
        broker.enqueue(message_to(subscriber, body))

    return deliver
