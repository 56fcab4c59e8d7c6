"""A delivery in flight: position reports applied in order, then the arrival at the drop-off."""

from uuid import UUID

from django.utils import timezone

from deliveries.confirmation import AWAITED, await_confirmation
from deliveries.events import DeliveryCompleted
from deliveries.models import Delivery
from deliveries.transitions import Status, announce, locked
from outbox.api import atomic

LATE = "late"  # the status reason of a delivery that reached its drop-off after its deadline


def record_position(*, delivery_id: UUID, location: dict) -> int:
    """Apply a position report (its handler is ordered: a stale report never gets here); the
    number of deliveries it moved, 0 for one no longer in transit.

    One UPDATE, not a locked read and a save: five reports a flight, and nothing else in the
    row is read or announced, so the row lock the UPDATE takes is all the ordering it needs."""
    in_transit = Delivery.objects.filter(id=delivery_id, status=Status.IN_TRANSIT)
    return in_transit.update(last_known_location=location, updated_at=timezone.now())


def record_arrival(*, delivery_id: UUID, location: dict) -> Delivery | None:
    """The drone is at the drop-off: delivered, or, when a confirmation is required, waiting for
    it with a task token issued and a timer set. Arriving after the deadline is `late`, said in the
    status reason the customer reads, never reported as on time."""
    with atomic():
        delivery = locked(delivery_id)
        if delivery is None or delivery.status != Status.IN_TRANSIT:
            return delivery
        delivery.last_known_location = location
        if delivery.deadline is not None and timezone.now() > delivery.deadline:
            delivery.status_reason = LATE
        if delivery.confirmation_required == "None":
            delivery.status = Status.DELIVERED
            announce(delivery, DeliveryCompleted(delivery_id=delivery.id, drone_id=delivery.drone_id))
        else:
            await_confirmation(delivery)
        delivery.save(update_fields=["last_known_location", "status", "status_reason", *AWAITED, "updated_at"])
        return delivery
