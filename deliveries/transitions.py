"""The moves every delivery use case makes: lock the row, fail it, announce on its stream.

Shared by the modules that split the context's services by subject (`services`, `join`,
`timers`, `flight`, `confirmation`, `rescheduling`); none of them publishes any other way.
"""

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from django.utils import timezone

from deliveries.events import DeliveryFailed, DeliveryStatusChanged, Location
from deliveries.models import Delivery
from outbox.api import Event, locked_row, publish_many, withdraw_scheduled

Status = Delivery.Status
Timer = tuple[Event, datetime]  # a delayed event this context sends itself, and when it is due
Announced = tuple[Event, datetime | None]  # an event, and when it is due (None: now)


class TooLate(Exception):
    """Cancelling and rescheduling are only possible before dispatch."""

    def __init__(self, status: str, change: str):
        super().__init__(f"a delivery that is {status} can no longer be {change}")
        self.reason = f"already_{status}"


class NotYet(Exception):
    """A change its delivery has not reached yet (a confirmation token before the drone is there),
    or never will (`reason` then says why)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def announce(delivery: Delivery, event=None, *, at: datetime | None = None, timers: Sequence[Timer] = ()) -> None:
    """Publish on the delivery's stream; the delivery id is the correlation id of its whole story.

    Every change of the delivery's status is announced here: when its status is not the one it was
    read with (or last announced), `delivery.status_changed` follows `event` and `timers` in the same
    statement, numbered by the row's `status_changes`, which the caller saves with the status. A use case
    that changes the status and has nothing else to say calls `announce(delivery)`."""
    announced: list[Announced] = [(event, at)] if event is not None else []
    announced += timers
    if delivery.status != getattr(delivery, "announced_status", None):
        delivery.status_changes += 1
        announced.append((status_changed(delivery), None))
        delivery.announced_status = delivery.status
    if announced:
        (first, first_at), *rest = announced
        announce_about(delivery.id, first, at=first_at, ended=delivery.is_terminal, followed_by=rest)


def status_changed(delivery: Delivery) -> DeliveryStatusChanged:
    """The delivery's status as it stands now, for outside systems (docs/api.md's status resource)."""
    location = delivery.last_known_location
    return DeliveryStatusChanged(
        delivery_id=delivery.id,
        customer_id=delivery.customer_id,
        status=delivery.status,
        status_reason=delivery.status_reason,
        change_number=delivery.status_changes,
        changed_at=timezone.now(),
        last_known_location=None
        if location is None
        else Location(**{name: location.get(name) for name in ("latitude", "longitude", "altitude")}),
        pickup_eta=delivery.pickup_eta,
        delivery_eta=delivery.eta,
    )


def announce_about(
    delivery_id: UUID,
    event,
    *,
    at: datetime | None = None,
    ended: bool = False,
    followed_by: Sequence[Announced] = (),
) -> None:
    """`ended`: the event tells the delivery's end, which withdraws the timers it set for itself
    (its deadline, its join and wait timeouts): moot now, they would only linger as pending.
    `followed_by`: the events after it on the stream, in the same statement: the delayed ones set
    with it (`deliveries.timers.timers_to_set`) and its status change (a request, its two timers
    and its `delivery.status_changed`: one INSERT, not four)."""
    stream = f"delivery:{delivery_id}"
    if ended:
        withdraw_scheduled(stream=stream)
    published, due = zip((event, at), *followed_by, strict=True)
    publish_many(list(published), stream=stream, correlation_id=delivery_id, available_at=list(due))


def locked(delivery_id: UUID) -> Delivery | None:
    """The delivery, its row locked until the transaction ends; None if there is none."""
    return locked_row(Delivery, delivery_id)


def fail(delivery: Delivery, reason: str) -> None:
    if delivery.is_terminal:
        return
    delivery.status, delivery.status_reason = Status.FAILED, reason
    announce(delivery, DeliveryFailed(delivery_id=delivery.id, reason=reason))
