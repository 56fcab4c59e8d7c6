"""One business transaction's story, rebuilt from the outbox, the inboxes and the dead letters."""

from uuid import UUID

from django.utils import timezone

from outbox import placement
from outbox.console.causality import in_causal_order
from outbox.console.database_choice import admin_id
from outbox.core.subscriptions import subscribers_of
from outbox.core.working_database import kernel_databases
from outbox.models import DeadLetter, InboxMessage, OutboxMessage


def correlation_timeline(correlation_id: UUID, *, scheduled: bool = False) -> list[dict]:
    """Every event of the correlation that has happened, in causal order, with who processed it; with `scheduled`,
    those still to come (a timer pending) too, marked so. Replays (copies for one subscriber) are folded into their
    original, as the time each subscriber's was sent."""
    with placement.acting_as(None):  # every context's rows: read as the operator (placement.rows)
        return _timeline(correlation_id, scheduled=scheduled)


def _timeline(correlation_id: UUID, *, scheduled: bool) -> list[dict]:
    now, databases = timezone.now(), kernel_databases()
    events: list[OutboxMessage] = []
    replayed: dict = {}
    processed: dict[UUID, dict[str, InboxMessage]] = {}
    dead: dict[UUID, dict[str, DeadLetter]] = {}
    for database in databases:
        rows = OutboxMessage.objects.using(database).filter(correlation_id=correlation_id, target_subscriber="")
        events += (rows if scheduled else rows.filter(available_at__lte=now)).order_by("id")
    ids = [e.message_id for e in events]
    for database in databases:
        copies = OutboxMessage.objects.using(database).filter(message_id__in=ids).exclude(target_subscriber="")
        replayed |= {(row.message_id, row.target_subscriber): row.available_at for row in copies}
        for row in InboxMessage.objects.using(database).filter(message_id__in=ids):
            processed.setdefault(row.message_id, {})[row.subscriber] = row
        for letter in DeadLetter.objects.using(database).filter(message_id__in=ids):
            if letter.message_id is not None:
                dead.setdefault(letter.message_id, {})[letter.subscriber] = letter
    events = causal_order(events)
    return [
        {
            "type": e.type,
            "version": e.version,
            "occurred_at": e.occurred_at,
            "published_by": e.source,
            "message_id": e.message_id,
            "causation_id": e.causation_id,
            "stream": e.stream,
            "sequence": e.sequence,
            "relayed_at": e.published_at,
            "scheduled": e.available_at > now,
            "subscribers": [
                {
                    **_handling(s, processed.get(e.message_id, {}).get(s), dead.get(e.message_id, {}).get(s)),
                    **_history(processed.get(e.message_id, {}).get(s), dead.get(e.message_id, {}).get(s)),
                    "replayed_at": replayed.get((e.message_id, s)),
                }
                for s in (e.recipients or subscribers_of(e.type))
            ],
        }
        for e in events
    ]


def causal_order(events: list[OutboxMessage]) -> list[OutboxMessage]:
    """Outbox rows, each after its cause (a copy for one subscriber after its original); ties in the
    given order. Ids order one outbox only, and by commit: neither says which came first."""
    return in_causal_order(
        events,
        name=lambda e: None if e.target_subscriber else e.message_id,
        cause=lambda e: e.message_id if e.target_subscriber else e.causation_id,
        when=lambda e: e.occurred_at,
    )


def _history(inbox: InboxMessage | None, letter: DeadLetter | None) -> dict:
    """What the outcome alone hides: copies skipped as duplicates, and a dead letter since
    resolved (the sequence diagram draws both; the JSON of the API leaves them out)."""
    return {
        "duplicates": inbox.duplicates if inbox is not None else 0,
        "dead_letter": None
        if letter is None
        else {
            "id": letter.pk,
            "reason": letter.reason,
            "attempts": letter.attempts,
            "status": letter.status,
            "first_failed_at": letter.first_failed_at,
        },
    }


def _handling(subscriber: str, inbox: InboxMessage | None, letter: DeadLetter | None) -> dict:
    if inbox is not None:
        return {"subscriber": subscriber, "outcome": "processed", "at": inbox.processed_at, "reason": None}
    if letter is not None:
        return {
            "subscriber": subscriber,
            "outcome": "dead_lettered",
            "at": letter.last_failed_at,
            "reason": letter.reason,
            "dead_letter_id": letter.pk,
            "dead_letter_admin_id": admin_id(letter),  # ids are each database's own
        }
    return {"subscriber": subscriber, "outcome": "pending", "at": None, "reason": None}
