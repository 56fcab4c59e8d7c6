from uuid import UUID

from django.db import transaction

from notifications.models import Notification

MESSAGES = {
    Notification.Kind.DISPATCHED: "Your package is on its way.",
    Notification.Kind.COMPLETED: "Your package has been delivered.",
    Notification.Kind.FAILED: "We could not deliver your package ({reason}).",
    Notification.Kind.CANCELLED: "Your delivery was cancelled.",
}


def notify(*, delivery_id: UUID, kind: str, reason: str = "") -> Notification:
    """Record one notification per (delivery, kind); a repeat changes nothing."""
    with transaction.atomic():
        notification, _ = Notification.objects.get_or_create(
            delivery_id=delivery_id, kind=kind, defaults={"message": MESSAGES[kind].format(reason=reason)}
        )
        return notification
