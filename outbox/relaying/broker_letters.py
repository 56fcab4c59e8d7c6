"""What Dramatiq set aside unread, brought into the dead-letter store the console shows.

A message dispatch never saw (not one of Dramatiq's, or one Dramatiq failed before the actor ran)
lands in the subscriber's `<queue>.XQ`. The relay's sweeper empties those queues on RabbitMQ into
the store: `unreadable` for what cannot be decoded (its first bytes kept), `failed_by_dramatiq`
for the rest (its envelope kept for a replay). Each is acknowledged only once its letter is
committed; a letter the message had already keeps its reason and status. One whose letter cannot
be written goes back to `.XQ` for the next sweep, and the other queues are still collected; one
whose envelope jsonb refuses (a NUL) is kept as text in an `unreadable` letter.
"""

import contextlib
import logging
import uuid

import dramatiq
from django.db import DataError, transaction
from dramatiq.common import xq_name
from dramatiq.errors import DecodeError

from outbox.core.brokers import is_rabbitmq, reconnected_if_lost
from outbox.core.dead_letters import Reason, record_dead_letter
from outbox.core.subscriptions import PACK, is_pack, queue_name
from outbox.core.working_database import current
from outbox.models import InboxMessage

logger = logging.getLogger(__name__)

KEPT_BYTES = 4096  # of an unreadable message: enough to tell what sent it


class SetAsideByTheBroker(Exception):
    """Why a message found in a subscriber's dead-letter queue is a dead letter."""


def collect_broker_dead_letters(broker: dramatiq.Broker, here: list[str], *, limit: int = 1000) -> int:
    """Move what waits in the `.XQ` of each subscriber `here` into the dead-letter store (they have their
    letters and inbox on the database worked in: another database's relay takes the rest); how many
    it moved."""
    if not is_rabbitmq(broker):
        return 0
    import pika.exceptions  # RabbitMQ's client, there with its broker

    # This thread's connection sits idle a sweep interval between uses: opened again if it was lost.
    reconnected_if_lost(broker)
    moved, failed = 0, None
    for subscriber in sorted(here):
        queue = xq_name(queue_name(subscriber))
        try:
            while moved < limit:
                method, _, body = broker.channel.basic_get(queue, auto_ack=False)
                if method is None:
                    break
                try:
                    _record(subscriber, body)
                except Exception as error:  # back in .XQ for the next sweep: unacked, it would wait on this channel
                    broker.channel.basic_reject(method.delivery_tag, requeue=True)
                    logger.warning("a message stays in %s: its dead letter could not be written: %s", queue, error)
                    failed = failed or error
                    break  # the other subscribers' queues still get their turn
                broker.channel.basic_ack(method.delivery_tag)
                moved += 1
        except pika.exceptions.ChannelClosedByBroker as error:  # not declared yet (404): nothing there
            del broker.channel
            if error.reply_code != 404:
                raise
        except pika.exceptions.AMQPConnectionError:  # lost since: the next sweep opens another
            del broker.connection
            raise
    if moved:
        logger.warning("%d message(s) from the broker's dead-letter queues are now dead letters", moved)
    if failed is not None:
        raise failed  # the sweeper logs it and tries again at its next run
    return moved


def _record(subscriber: str, body: bytes) -> None:
    try:
        message = dramatiq.Message.decode(body)
    except DecodeError:
        _record_unreadable(subscriber, body, f"not a Dramatiq message ({len(body)} bytes): rejected unread")
        return
    try:
        _record_message(subscriber, message)
    except DataError as error:  # a value the store cannot hold (a NUL in jsonb): never will, kept as text instead
        _record_unreadable(
            subscriber, body, f"Dramatiq failed {message.message_id}; its letter cannot hold it: {error}"
        )


def _record_unreadable(subscriber: str, body: bytes, why: str) -> None:
    record_dead_letter(
        subscriber=subscriber,
        body={"unreadable": _text(body[:KEPT_BYTES]), "bytes": len(body)},
        reason=Reason.UNREADABLE,
        error=SetAsideByTheBroker(why),
    )


def _record_message(subscriber: str, message: dramatiq.Message) -> None:
    if is_pack(message.args, message.kwargs):
        _record_pack(subscriber, message)
        return
    only = message.args[0] if len(message.args) == 1 and not message.kwargs else None
    _record_failed(subscriber, only if isinstance(only, dict) else None, message)


def _text(data: bytes) -> str:
    """Bytes as text a letter can hold: PostgreSQL's jsonb refuses NUL, so it is replaced like invalid UTF-8."""
    return data.decode("utf-8", "replace").replace("\x00", "\ufffd")


def _record_pack(subscriber: str, pack: dramatiq.Message) -> None:
    """A letter for each envelope the pack carried, all or none, except those its subscriber has
    processed already (a pack fails into .XQ after some of its envelopes were handled): a letter
    would reopen them for a replay that, once the inbox row is pruned, applies them twice."""
    envelopes = pack.kwargs[PACK]
    ids = {str(e.get("message_id")) for e in envelopes if isinstance(e, dict)}
    processed = {
        str(message_id)
        for message_id in InboxMessage.objects.filter(subscriber=subscriber, message_id__in=_uuids(ids)).values_list(
            "message_id", flat=True
        )
    }
    with transaction.atomic(using=current()):
        for envelope in envelopes:
            if isinstance(envelope, dict) and str(envelope.get("message_id")) in processed:
                continue
            body = envelope if isinstance(envelope, dict) else {"args": [envelope], "kwargs": {}}
            _record_failed(subscriber, body, pack)


def _uuids(ids: set[str]) -> list[uuid.UUID]:
    found = []
    for message_id in ids:
        with contextlib.suppress(ValueError):
            found.append(uuid.UUID(message_id))
    return found


def _record_failed(subscriber: str, envelope: dict | None, message: dramatiq.Message) -> None:
    body = envelope if isinstance(envelope, dict) else {"args": list(message.args), "kwargs": message.kwargs}
    record_dead_letter(
        subscriber=subscriber,
        body=body,
        reason=Reason.FAILED_BY_DRAMATIQ,
        error=SetAsideByTheBroker(f"Dramatiq failed {message.message_id} before its handler ran"),
        earlier_stands=True,  # a letter dispatch wrote, or one closed since, says more than this copy
    )
