"""Rescheduling before dispatch: new times, or new places that start another scheduling round."""

from datetime import datetime
from uuid import UUID

from django.utils import timezone

from deliveries.deadlines import unmeetable
from deliveries.events import DeliveryRescheduled, Location, priority_of
from deliveries.models import Customer, Delivery
from deliveries.timers import timers_to_set
from deliveries.transitions import Status, TooLate, announce
from outbox.api import atomic


class InvalidReschedule(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def reschedule_delivery(
    *,
    delivery_id: UUID,
    customer: Customer,
    pickup_time: datetime | None = None,
    deadline: datetime | None = None,
    pickup: dict | None = None,
    dropoff: dict | None = None,
) -> Delivery:
    """Change times or places before dispatch; new places or a new pickup time start another scheduling round."""
    with atomic("deliveries"):
        delivery = Delivery.objects.select_for_update().get(id=delivery_id, customer=customer)
        if delivery.status not in Delivery.BEFORE_DISPATCH:
            raise TooLate(delivery.status, "rescheduled")
        new_pickup_time, new_deadline = pickup_time or delivery.pickup_time, deadline or delivery.deadline
        if new_deadline is not None and new_deadline < new_pickup_time:
            raise InvalidReschedule("deadline", "deadline must not be before pickupTime")
        moved = (pickup is not None and pickup != delivery.pickup_location) or (
            dropoff is not None and dropoff != delivery.dropoff_location
        )
        if new_deadline is not None and (
            refusal := _unmeetable(delivery, new_deadline, new_pickup_time, pickup, dropoff)
        ):
            raise InvalidReschedule("deadline", refusal)
        deadline_moved = new_deadline != delivery.deadline
        replan = moved or new_pickup_time != delivery.pickup_time
        delivery.pickup_time, delivery.deadline = new_pickup_time, new_deadline
        delivery.pickup_location = pickup if pickup is not None else delivery.pickup_location
        delivery.dropoff_location = dropoff if dropoff is not None else delivery.dropoff_location
        if replan:
            delivery.schedule_round += 1
            delivery.status, delivery.status_reason, delivery.drone_id = Status.REQUESTED, "", None
            delivery.eta = delivery.pickup_eta = delivery.waiting_since = None
        announce(
            delivery,
            DeliveryRescheduled(
                delivery_id=delivery.id,
                round=delivery.schedule_round,
                pickup=Location(**delivery.pickup_location),
                dropoff=Location(**delivery.dropoff_location),
                pickup_time=delivery.pickup_time,
                deadline=delivery.deadline,
                weight_kg=delivery.package_weight_kg,
                priority=priority_of(expedited=delivery.expedited),
                locations_changed=moved,
            ),
            timers=timers_to_set(delivery, join=replan, deadline=deadline_moved),
        )
        delivery.save()
        return delivery


def _unmeetable(delivery: Delivery, deadline: datetime, pickup_time: datetime, pickup, dropoff) -> str | None:
    return unmeetable(
        deadline=deadline,
        pickup_time=max(pickup_time, timezone.now()),
        pickup=pickup if pickup is not None else delivery.pickup_location,
        dropoff=dropoff if dropoff is not None else delivery.dropoff_location,
    )
