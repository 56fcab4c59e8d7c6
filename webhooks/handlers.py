"""Reads the deliveries context's `delivery.status_changed` (never importing it), its own `webhook.due`,
and its own `webhook.endpoint_disabled`, to e-mail the endpoint's alert address."""

from datetime import datetime
from uuid import UUID

from outbox.api import Reader, Received, subscribe
from webhooks import services


class Place(Reader):
    latitude: float
    longitude: float
    altitude: float | None = None


class StatusChanged(Reader):
    """Just what a webhook tells of a status change."""

    delivery_id: UUID
    customer_id: UUID
    status: str
    status_reason: str = ""
    change_number: int | None = None  # None in a change published before the deliveries numbered them
    changed_at: datetime
    last_known_location: Place | None = None
    pickup_eta: datetime | None = None
    delivery_eta: datetime | None = None


# Not `ordered`: that drops a change heard after a later one as stale, and every change is owed a
# message; the messages keep the changes' order by their numbers (services.attempt).
@subscribe("webhooks", "delivery.status_changed", reader=StatusChanged)
def on_status_changed(message: Received[StatusChanged]) -> None:
    change = message.payload
    services.enqueue_status_change(
        customer_id=change.customer_id,
        delivery_id=change.delivery_id,
        status=change.status,
        status_reason=change.status_reason,
        changed_at=change.changed_at,
        last_known_location=change.last_known_location.model_dump() if change.last_known_location else None,
        pickup_eta=change.pickup_eta,
        delivery_eta=change.delivery_eta,
        sequence=message.envelope.sequence,
        change_number=change.change_number,
    )


class Due(Reader):
    webhook_id: str
    after_attempts: int | None = None


# POSTs to the customer's endpoint: committed alone, never in a pack's shared transaction, so that
# no neighbour's failure can roll back its attempt and have it sent again.
@subscribe("webhooks", "webhook.due", reader=Due, outside_effects=True)
def on_webhook_due(message: Received[Due]) -> None:
    services.attempt(message_id=message.payload.webhook_id, after_attempts=message.payload.after_attempts)


class Disabled(Reader):
    endpoint_id: UUID


# An e-mail: an outside effect, committed alone for the same reason as a POST.
@subscribe("webhooks", "webhook.endpoint_disabled", reader=Disabled, outside_effects=True)
def on_endpoint_disabled(message: Received[Disabled]) -> None:
    services.alert_disabled(endpoint_id=message.payload.endpoint_id)
