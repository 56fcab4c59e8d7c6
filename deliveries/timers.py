"""Timers: delayed events the deliveries context sends itself, and what each does when it fires.

The join timeout and the deadline are set when a request is taken in (or rescheduled); the
wait timer by `join.record_waiting`, the confirmation timer by `confirmation`.
"""

from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from deliveries.events import DeliveryDeadlinePassed, DeliveryJoinTimedOut
from deliveries.models import Delivery
from deliveries.transitions import Status, Timer, fail, locked
from outbox.api import atomic


def timers_to_set(delivery: Delivery, *, join: bool = True, deadline: bool = True) -> list[Timer]:
    """The join timeout and the deadline, as delayed events to this context itself, for
    `announce(..., timers=...)` to publish with the event that sets them."""
    timers: list[Timer] = []
    if join:
        timeout = timedelta(seconds=settings.DELIVERY_JOIN_TIMEOUT_SECONDS)
        due = timezone.now() + timeout
        timers.append((DeliveryJoinTimedOut(delivery_id=delivery.id, round=delivery.schedule_round), due))
    if deadline and delivery.deadline:
        timers.append((DeliveryDeadlinePassed(delivery_id=delivery.id, deadline=delivery.deadline), delivery.deadline))
    return timers


def expire_join(*, delivery_id: UUID, round: int = 1) -> Delivery | None:
    """The join timer fired: a delivery one of whose contexts has not answered this round fails, compensated.

    An answer is what counts, not a free drone: a delivery in the drones' waiting line whose
    package is ready is legitimately waiting.
    """
    return fail_if_not_dispatched(
        delivery_id,
        "join_timeout",
        still=lambda d: d.schedule_round == round and (d.status == Status.REQUESTED or not d.package_ready),
    )


def expire_wait(*, delivery_id: UUID, round: int) -> Delivery | None:
    """The longest wait for a drone is over: a delivery still in line fails with no_drone_available,
    as does one dispatched whose drone was grounded and that has not got another since."""
    with atomic("deliveries"):
        delivery = locked(delivery_id)
        drone_less = delivery is not None and (
            delivery.status == Status.WAITING_FOR_DRONE
            or (delivery.status == Status.IN_TRANSIT and delivery.drone_id is None)
        )
        if drone_less and delivery.schedule_round == round:
            fail(delivery, "no_drone_available")
            delivery.save()
        return delivery


def expire_deadline(*, delivery_id: UUID, deadline: datetime | None = None) -> Delivery | None:
    """The deadline timer fired; a timer for a deadline since moved changes nothing."""
    return fail_if_not_dispatched(delivery_id, "deadline_missed", still=lambda d: deadline in (None, d.deadline))


def fail_if_not_dispatched(delivery_id: UUID, reason: str, *, still: Callable[[Delivery], bool]) -> Delivery | None:
    with atomic("deliveries"):
        delivery = locked(delivery_id)
        if delivery is not None and delivery.status in Delivery.BEFORE_DISPATCH and still(delivery):
            fail(delivery, reason)
            delivery.save()
        return delivery
