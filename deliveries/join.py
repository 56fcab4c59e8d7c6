"""The join: the package's answer and the drone scheduler's, in either order, make a delivery
dispatched exactly once; the scheduler's "waiting" news puts it in line meanwhile."""

from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from deliveries.events import DeliveryDispatched, DeliveryWaitTimedOut
from deliveries.models import Delivery
from deliveries.transitions import Status, announce, locked
from outbox.api import atomic, save_fields


def record_package_ready(*, delivery_id: UUID) -> Delivery | None:
    with atomic("deliveries"):
        delivery = locked(delivery_id)
        if delivery is None or delivery.is_terminal:
            return delivery
        delivery.package_ready = True
        dispatch_when_ready(delivery)
        save_fields(delivery, ["package_ready", *JOINED])
        return delivery


def record_drone_scheduled(
    *,
    delivery_id: UUID,
    drone_id: UUID,
    eta: datetime,
    pickup_eta: datetime | None = None,
    round: int = 1,
    at: datetime | None = None,
) -> Delivery | None:
    """A drone is reserved (`at`): the first half of the join, or a new drone after the last was grounded."""
    with atomic("deliveries"):
        delivery = locked(delivery_id)
        if delivery is None or delivery.is_terminal or round != delivery.schedule_round:
            return delivery  # the drone context releases it on delivery.failed/cancelled or the reschedule
        delivery.drone_id, delivery.eta, delivery.pickup_eta = drone_id, eta, pickup_eta
        delivery.drone_scheduled_at = at or timezone.now()
        if delivery.status in Delivery.BEFORE_DISPATCH:
            delivery.status, delivery.status_reason = Status.SCHEDULED, ""
        dispatch_when_ready(delivery)
        announce(delivery)  # scheduled, unless dispatched at once
        save_fields(delivery, ["drone_id", "eta", "pickup_eta", "drone_scheduled_at", "status_reason", *JOINED])
        return delivery


def record_waiting(
    *, delivery_id: UUID, round: int, reason: str, expected_pickup_at: datetime | None
) -> Delivery | None:
    """The drone scheduler put the delivery in its line (`reason`: fleet_busy or pickup_planned).

    A delivery without a deadline then gets a timer: it waits at most DELIVERY_MAX_WAIT_SECONDS
    after its pickup time. One already dispatched whose drone an operator grounded before it took
    off stays in transit, drone-less, and gets that timer whatever its deadline: the deadline no
    longer fails a delivery that has left.
    """
    with atomic("deliveries"):
        delivery = locked(delivery_id)
        if delivery is None or round != delivery.schedule_round:
            return delivery
        if delivery.status in Delivery.BEFORE_DISPATCH:
            delivery.status, delivery.status_reason = Status.WAITING_FOR_DRONE, reason
        elif delivery.status != Status.IN_TRANSIT:
            return delivery
        # Its drone grounded after it left (once: a second report of it finds no drone to lose).
        left_without_a_drone = delivery.status == Status.IN_TRANSIT and delivery.drone_id is not None
        delivery.drone_id, delivery.eta, delivery.pickup_eta = None, None, expected_pickup_at
        first_wait = delivery.waiting_since is None
        if first_wait:
            delivery.waiting_since = timezone.now()
        # A delivery that had waited before it left still needs the timer now: the deadline no
        # longer fails one in transit, and nothing else would.
        timers = []
        if (first_wait and delivery.deadline is None) or left_without_a_drone:
            give_up_at = max(timezone.now(), delivery.pickup_time) + timedelta(
                seconds=settings.DELIVERY_MAX_WAIT_SECONDS
            )
            timers.append((DeliveryWaitTimedOut(delivery_id=delivery.id, round=round), give_up_at))
        announce(delivery, timers=timers)
        delivery.save()
        return delivery


# What `dispatch_when_ready` may change, with the row's time: the join's saves name their fields
# (a full-row save wrote and serialized all thirty, six of them JSON, twice a delivery).
JOINED = ("status", "status_changes", "updated_at")


def dispatch_when_ready(delivery: Delivery) -> None:
    """The join: both halves in, in either order, exactly once."""
    if delivery.status in Delivery.BEFORE_DISPATCH and delivery.package_ready and delivery.drone_id:
        delivery.status = Status.IN_TRANSIT
        announce(
            delivery,
            DeliveryDispatched(delivery_id=delivery.id, drone_id=delivery.drone_id, package_id=delivery.package_id),
        )
