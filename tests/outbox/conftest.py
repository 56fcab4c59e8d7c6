import pytest

from outbox.core.subscriptions import message_to


@pytest.fixture
def deliver(broker):
    """Put an envelope straight on one subscriber's queue, bypassing the relay."""

    def deliver(subscriber: str, body: dict) -> None:
        broker.enqueue(message_to(subscriber, body))

    return deliver
