"""Subscribes to the deliveries context's broadcast events; nobody upstream knows it exists."""

from uuid import UUID

from notifications.models import Notification
from notifications.services import notify, send_message
from outbox.api import Reader, Received, subscribe


class DeliveryEvent(Reader):
    delivery_id: UUID
    reason: str = ""


@subscribe("notifications", "delivery.dispatched", reader=DeliveryEvent)
def on_dispatched(message: Received[DeliveryEvent]) -> None:
    notify(delivery_id=message.payload.delivery_id, kind=Notification.Kind.DISPATCHED)


@subscribe("notifications", "delivery.confirmation_requested", reader=DeliveryEvent)
def on_confirmation_requested(message: Received[DeliveryEvent]) -> None:
    notify(delivery_id=message.payload.delivery_id, kind=Notification.Kind.CONFIRMATION_REQUESTED)


@subscribe("notifications", "delivery.completed", reader=DeliveryEvent)
def on_completed(message: Received[DeliveryEvent]) -> None:
    notify(delivery_id=message.payload.delivery_id, kind=Notification.Kind.COMPLETED)


@subscribe("notifications", "delivery.failed", reader=DeliveryEvent)
def on_failed(message: Received[DeliveryEvent]) -> None:
    notify(delivery_id=message.payload.delivery_id, kind=Notification.Kind.FAILED, reason=message.payload.reason)


@subscribe("notifications", "delivery.cancelled", reader=DeliveryEvent)
def on_cancelled(message: Received[DeliveryEvent]) -> None:
    notify(delivery_id=message.payload.delivery_id, kind=Notification.Kind.CANCELLED)


class Due(Reader):
    sent_message_id: int


# Sends an e-mail or an SMS: committed alone, never in a pack's shared transaction, so that no
# neighbour's failure can roll back its `sent_at` and have it sent again.
@subscribe("notifications", "notification.due", reader=Due, outside_effects=True)
def on_notification_due(message: Received[Due]) -> None:
    send_message(sent_message_id=message.payload.sent_message_id)
