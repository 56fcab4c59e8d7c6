"""Moving a deployment's queues to another queue type (classic to quorum, for a cluster) without
losing a message: RabbitMQ fixes a queue's type when it is declared, and no policy changes it.

For each subscriber queue and its Dramatiq companions (.DQ delayed, .XQ dead), with the relays
and workers stopped: every message is moved to a holding queue (`<name>.moving`), the queue is
deleted and declared again as the broker now declares it (RABBITMQ_QUEUE_TYPE), and the messages
are moved back. A message is acknowledged on its old queue only after the broker confirmed its
copy on the new one, so a crash midway loses nothing: run the command again and it first brings
back what a holding queue still holds. At worst a message is moved twice, which the subscriber's
inbox absorbs like any other duplicate.
"""

from collections.abc import Callable, Iterator

import pika
import pika.exceptions
from dramatiq.common import dq_name, xq_name

from outbox.ops import QueueTypeRabbitmqBroker

HOLDING_SUFFIX = ".moving"


class QueueInUse(Exception):
    """A queue still has consumers (workers would take messages while they are being moved), or
    took a message while being moved (a relay still publishing: consumers can be counted,
    publishers cannot)."""


def queues_of(subscriber_queues: list[str]) -> Iterator[str]:
    for name in subscriber_queues:
        yield from (name, dq_name(name), xq_name(name))


def move_queues(
    broker: QueueTypeRabbitmqBroker, subscriber_queues: list[str], *, progress: Callable[[str], None]
) -> dict[str, int]:
    """Declare every queue of `subscriber_queues` anew as `broker` declares queues, keeping its
    messages; returns how many each held. Refuses (QueueInUse) while any has a consumer."""
    existing = {queue: _count(broker, queue) for queue in queues_of(subscriber_queues)}
    busy = [queue for queue, (_, consumers) in existing.items() if consumers]
    if busy:
        raise QueueInUse(f"stop the workers first: {', '.join(busy)} still have consumers")
    moved = {}
    for name in subscriber_queues:
        channel = _confirming_channel(broker)
        for queue in (name, dq_name(name), xq_name(name)):
            holding = queue + HOLDING_SUFFIX
            channel.queue_declare(holding, durable=True, arguments={"x-queue-type": "quorum"})
            if existing[queue][0] is not None:
                moved[queue] = _move(channel, queue, holding)
                _delete_if_empty(channel, queue)
        broker.queues.discard(name)
        broker.queues_pending.add(name)
        broker.declare_queue(name, ensure=True)  # the queue and its companions, of the new type
        channel.close()
        # A channel that published to the old queue must not publish to the new one of the same
        # name: RabbitMQ 3.10 keeps the old queue's type in the channel's state and closes the
        # connection with INTERNAL_ERROR.
        channel = _confirming_channel(broker)
        for queue in (name, dq_name(name), xq_name(name)):
            holding = queue + HOLDING_SUFFIX
            back = _move(channel, holding, queue)
            _delete_if_empty(channel, holding)
            moved[queue] = max(moved.get(queue, 0), back)
            progress(f"{queue}: {back} messages, now {broker.queue_type}")
        channel.close()
    return moved


def _delete_if_empty(channel, queue: str) -> None:
    """Delete `queue` only if nothing arrived since it was emptied: a message a relay published
    meanwhile stays where it is, and the move stops, to be run again once the relays are stopped.
    Counted, then deleted: quorum queues refuse `queue.delete` with `if-empty` (NOT_IMPLEMENTED,
    closing the connection), so a message published in the round trip between stays possible;
    the command's docs say to stop the relays first."""
    if channel.queue_declare(queue, passive=True).method.message_count:
        raise QueueInUse(
            f"{queue} took a message while it was being moved: stop the relays too, then run it again "
            "(what is moved already waits in its .moving queue and is brought back first)"
        )
    channel.queue_delete(queue)


def _confirming_channel(broker: QueueTypeRabbitmqBroker):
    channel = broker.connection.channel()
    channel.confirm_delivery()
    return channel


def _count(broker: QueueTypeRabbitmqBroker, queue: str) -> tuple[int | None, int]:
    """(messages, consumers) of a queue, or (None, 0) if it does not exist."""
    channel = broker.connection.channel()
    try:
        ok = channel.queue_declare(queue, passive=True).method
        return ok.message_count, ok.consumer_count
    except pika.exceptions.ChannelClosedByBroker as error:
        if error.reply_code == 404:
            return None, 0
        raise
    finally:
        if channel.is_open:
            channel.close()


def _move(channel, source: str, target: str) -> int:
    """Every message of `source` to `target`, each acked only once its copy is confirmed."""
    moved = 0
    while True:
        method, properties, body = channel.basic_get(source, auto_ack=False)
        if method is None:
            return moved
        channel.basic_publish("", target, body, properties, mandatory=True)  # waits for its confirm
        channel.basic_ack(method.delivery_tag)
        moved += 1
