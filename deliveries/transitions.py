"""The moves every delivery use case makes: lock the row, fail it, announce on its stream.

Shared by the modules that split the context's services by subject (`services`, `join`,
`timers`, `flight`, `confirmation`, `rescheduling`); none of them publishes any other way.
"""

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from deliveries.events import DeliveryFailed
from deliveries.models import Delivery
from outbox.api import Event, locked_row, publish_many, withdraw_scheduled

Status = Delivery.Status
Timer = tuple[Event, datetime]  # a delayed event this context sends itself, and when it is due


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


def announce(delivery: Delivery, event, *, at: datetime | None = None, timers: Sequence[Timer] = ()) -> None:
    """Publish on the delivery's stream; the delivery id is the correlation id of its whole story."""
    announce_about(delivery.id, event, at=at, ended=delivery.is_terminal, timers=timers)


def announce_about(
    delivery_id: UUID, event, *, at: datetime | None = None, ended: bool = False, timers: Sequence[Timer] = ()
) -> None:
    """`ended`: the event tells the delivery's end, which withdraws the timers it set for itself
    (its deadline, its join and wait timeouts): moot now, they would only linger as pending.
    `timers`: the delayed events set with it (`deliveries.timers.timers_to_set`), after it on the
    stream and in the same statement (a request and its two timers: one INSERT, not three)."""
    stream = f"delivery:{delivery_id}"
    if ended:
        withdraw_scheduled(stream=stream)
    published, due = zip((event, at), *timers, strict=True)
    publish_many(list(published), stream=stream, correlation_id=delivery_id, available_at=list(due))


def locked(delivery_id: UUID) -> Delivery | None:
    """The delivery, its row locked until the transaction ends; None if there is none."""
    return locked_row(Delivery, delivery_id)


def fail(delivery: Delivery, reason: str) -> None:
    if delivery.is_terminal:
        return
    delivery.status, delivery.status_reason = Status.FAILED, reason
    announce(delivery, DeliveryFailed(delivery_id=delivery.id, reason=reason))
