"""Reads the API needs: a customer's own deliveries, and one delivery's timeline."""

from uuid import UUID

from django.db.models import QuerySet
from django.utils import timezone

from deliveries.models import Customer, Delivery
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.subscriptions import subscribers_of


def deliveries_of(customer: Customer) -> QuerySet[Delivery]:
    return Delivery.objects.filter(customer=customer).order_by("-created_at", "-id")


def delivery_of(customer: Customer, delivery_id: UUID) -> Delivery | None:
    """The customer's delivery, or None: another customer's delivery does not exist for them."""
    return Delivery.objects.filter(customer=customer, id=delivery_id).first()


def timeline(delivery: Delivery) -> list[dict]:
    """Every event of the delivery that has happened, in causal order, with who processed it.

    A child event is appended while its cause is being handled, after the cause committed,
    so outbox id order is a causal order. Events scheduled for later have not happened yet.
    """
    events = list(
        OutboxMessage.objects.filter(correlation_id=delivery.id, available_at__lte=timezone.now()).order_by("id")
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
                for s in subscribers_of(e.type)
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
        }
    return {"subscriber": subscriber, "outcome": "pending", "at": None, "reason": None}
