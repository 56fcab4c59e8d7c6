"""The inbox's receipts: a message recorded as received by a subscriber, in the transaction its
handler runs in, so that a second copy finds it and is skipped.

One envelope records its own (`first_receipt`); a pack's envelopes, handled in one transaction,
record theirs together in one statement before the first handler runs (`receive_together`, for
those `sure_to_reach_their_handler`), and what a pack then hands on alone, or what failed in a pass
rolled back to the pack's savepoint, is taken back (`withdraw_receipts`)."""

from typing import Any
from uuid import UUID

from django.conf import settings
from django.utils import timezone
from pydantic import ValidationError

from outbox.core.dead_letters import REPLAYABLE
from outbox.core.envelope import Envelope
from outbox.core.subscriptions import subscription
from outbox.core.working_database import connection
from outbox.models import DeadLetter, InboxMessage


def first_receipt(subscriber: str, envelope: Envelope) -> tuple[bool, bool]:
    """Record the message in the subscriber's inbox: (False, …) if it was there already, then whether it has an
    open or replayed dead letter for this subscriber, which only then needs closing as processed. One statement,
    no savepoint: a concurrent copy waits on the unique index, then finds the row there."""
    inbox = connection.ops.quote_name(InboxMessage._meta.db_table)
    letters = connection.ops.quote_name(DeadLetter._meta.db_table)
    message_id = _uuid_field.get_db_prep_value(envelope.message_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {inbox} (subscriber, message_id, type, correlation_id, processed_at, duplicates) "
            "VALUES (%s, %s, %s, %s, %s, 0) ON CONFLICT (subscriber, message_id) DO NOTHING "
            f"RETURNING id, EXISTS (SELECT 1 FROM {letters} WHERE subscriber = %s AND message_id = %s "
            "AND status IN (%s, %s))",
            [
                subscriber,
                message_id,
                envelope.type,
                _uuid_field.get_db_prep_value(envelope.correlation_id, connection),
                _time_field.get_db_prep_value(timezone.now(), connection),
                subscriber,
                message_id,
                *REPLAYABLE,
            ],
        )
        row = cursor.fetchone()
        return (False, False) if row is None else (True, bool(row[1]))


def sure_to_reach_their_handler(subscriber: str, bodies: dict[int, Any]) -> dict[int, Envelope]:
    """The envelopes of a pack (by position) sure to reach their handler: readable, handled by the
    subscriber in a version it reads, within the hops. What a pack writes receipts for and holds
    the streams of; whatever else it holds is only dead-lettered, or waits for its limits."""
    envelopes: dict[int, Envelope] = {}
    for position, body in bodies.items():
        try:
            envelope = Envelope.model_validate(body)
        except ValidationError:
            continue
        sub = subscription(subscriber, envelope.type)
        if sub is not None and envelope.version in sub.versions and envelope.hops <= settings.OUTBOX_MAX_HOPS:
            envelopes[position] = envelope
    return envelopes


def receive_together(subscriber: str, envelopes: dict[int, Envelope]) -> dict[int, tuple[bool, bool]]:
    """Record in one statement the inbox rows of a pack's envelopes (by position) sure to reach their handler:
    for each, what `first_receipt` would have said; an envelope twice in the pack is first at its first position.
    PostgreSQL and a subscriber with no limits only: otherwise {}, and each envelope writes its own."""
    if connection.vendor != "postgresql" or subscriber in settings.OUTBOX_SUBSCRIBER_LIMITS:
        return {}  # SQLite (in process, no round trips to save) cannot read the alias in RETURNING
    if not envelopes:
        return {}
    # In message id order, so that two packs with copies of the same messages wait for each other, never deadlock.
    unique = sorted({e.message_id: e for e in envelopes.values()}.values(), key=lambda e: e.message_id)
    inbox = connection.ops.quote_name(InboxMessage._meta.db_table)
    letters = connection.ops.quote_name(DeadLetter._meta.db_table)
    now = _time_field.get_db_prep_value(timezone.now(), connection)
    rows, params = [], []
    for envelope in unique:
        rows.append("(%s, %s, %s, %s, %s, 0)")
        params += [
            subscriber,
            _uuid_field.get_db_prep_value(envelope.message_id, connection),
            envelope.type,
            _uuid_field.get_db_prep_value(envelope.correlation_id, connection),
            now,
        ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {inbox} AS received (subscriber, message_id, type, correlation_id, processed_at, duplicates) "
            f"VALUES {', '.join(rows)} ON CONFLICT (subscriber, message_id) DO NOTHING "
            f"RETURNING received.message_id, EXISTS (SELECT 1 FROM {letters} WHERE subscriber = received.subscriber "
            "AND message_id = received.message_id AND status IN (%s, %s))",
            [*params, *REPLAYABLE],
        )
        inserted = {str(message_id): bool(letter) for message_id, letter in cursor.fetchall()}
    receipts, seen = {}, set()
    for position, envelope in sorted(envelopes.items()):
        key = str(envelope.message_id)
        first = key in inserted and key not in seen
        receipts[position] = (first, first and inserted[key])
        seen.add(key)
    return receipts


def withdraw_receipts(subscriber: str, message_ids: list[UUID]) -> None:
    """Take back inbox rows `receive_together` wrote for envelopes that are not handled after all
    (what is left of a pack that has used its time limit, handed on alone)."""
    if message_ids:
        InboxMessage.objects.filter(subscriber=subscriber, message_id__in=message_ids).delete()


_uuid_field = InboxMessage._meta.get_field("message_id")
_time_field = InboxMessage._meta.get_field("processed_at")
