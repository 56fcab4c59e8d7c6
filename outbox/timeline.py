"""One business transaction's story, rebuilt from the outbox, the inboxes and the dead letters."""

from uuid import UUID

from django.utils import timezone

from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.subscriptions import subscribers_of


def correlation_timeline(correlation_id: UUID) -> list[dict]:
    """Every event of the correlation that has happened, in causal order, with who processed it.

    A child event is appended while its cause is being handled, after the cause committed,
    so outbox id order is a causal order. Events scheduled for later have not happened yet;
    replays (copies for one subscriber) are folded into their original.
    """
    events = list(
        OutboxMessage.objects.filter(
            correlation_id=correlation_id, available_at__lte=timezone.now(), target_subscriber=""
        ).order_by("id")
    )
    ids = [e.message_id for e in events]
    processed: dict[UUID, dict[str, InboxMessage]] = {}
    for row in InboxMessage.objects.filter(message_id__in=ids):
        processed.setdefault(row.message_id, {})[row.subscriber] = row
    dead: dict[UUID, dict[str, DeadLetter]] = {}
    for row in DeadLetter.objects.filter(message_id__in=ids):
        dead.setdefault(row.message_id, {})[row.subscriber] = row
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
            "subscribers": [
                _handling(s, processed.get(e.message_id, {}).get(s), dead.get(e.message_id, {}).get(s))
                for s in (e.recipients or subscribers_of(e.type))
            ],
        }
        for e in events
    ]


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
        }
    return {"subscriber": subscriber, "outcome": "pending", "at": None, "reason": None}
