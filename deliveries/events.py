"""The contracts the deliveries context publishes."""

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from outbox.api import Event, upcaster


class Location(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    latitude: float
    longitude: float
    altitude: float | None = None


class PackageInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    package_id: UUID
    size: str
    weight_kg: float
    tag: str | None = Field(
        None,
        max_length=100,
        description="The customer's label for the package, at most 100 characters: not for personal data.",
    )


class DeliveryRequestedV1(Event):
    """Version 1, still declared: it is in the catalog, and such messages may still be queued."""

    type = "delivery.requested"
    version = 1
    delivery_id: UUID
    pickup: Location
    dropoff: Location
    pickup_time: datetime
    deadline: datetime | None = None
    expedited: bool = False
    confirmation_required: str = "None"
    package: PackageInfo


class DeliveryRequested(DeliveryRequestedV1):
    """Version 2 adds `priority`, which version 1 messages get from `expedited` when upcast."""

    type = "delivery.requested"
    version = 2
    priority: Literal["normal", "high"]


def priority_of(*, expedited: bool) -> Literal["normal", "high"]:
    """The one rule behind `priority`, for new events and for upcast v1 ones alike."""
    return "high" if expedited else "normal"


@upcaster("delivery.requested", from_version=1)
def _priority_from_expedited(payload: dict) -> dict:
    return {**payload, "priority": priority_of(expedited=bool(payload.get("expedited")))}


class DeliveryDispatched(Event):
    type = "delivery.dispatched"
    version = 1
    delivery_id: UUID
    drone_id: UUID
    package_id: UUID


class DeliveryCompleted(Event):
    type = "delivery.completed"
    version = 1
    delivery_id: UUID
    drone_id: UUID


class DeliveryConfirmationRequested(Event):
    """The drone is at the drop-off; the delivery waits for the recipient's confirmation. Only the
    task token's id travels: the token itself stays in the deliveries context."""

    type = "delivery.confirmation_requested"
    version = 1
    delivery_id: UUID
    token_id: UUID
    confirmation_type: str


class DeliveryConfirmationTimedOut(Event):
    """Timer: published for DELIVERY_CONFIRMATION_TIMEOUT_SECONDS after the token was issued."""

    type = "delivery.confirmation_timed_out"
    version = 1
    delivery_id: UUID
    token_id: UUID


class DeliveryFailed(Event):
    """`reason`: the upstream reason code (too_heavy, no_drone_available, ...)."""

    type = "delivery.failed"
    version = 1
    delivery_id: UUID
    reason: str


class DeliveryCancelled(Event):
    type = "delivery.cancelled"
    version = 1
    delivery_id: UUID
    reason: str


class DeliveryJoinTimedOut(Event):
    """A timer the context sets for itself: fires DELIVERY_JOIN_TIMEOUT_SECONDS after each scheduling round."""

    type = "delivery.join_timed_out"
    version = 1
    delivery_id: UUID
    round: int = 1


class DeliveryWaitTimedOut(Event):
    """A timer the context sets for itself when a delivery without a deadline starts waiting for a drone:
    fires DELIVERY_MAX_WAIT_SECONDS after its pickup time."""

    type = "delivery.wait_timed_out"
    version = 1
    delivery_id: UUID
    round: int


class DeliveryDeadlinePassed(Event):
    """A timer the context sets for itself: fires at the customer's deadline."""

    type = "delivery.deadline_passed"
    version = 1
    delivery_id: UUID
    deadline: datetime | None = None  # the deadline it was set for; a rescheduled one makes it moot


class DeliveryRescheduled(Event):
    """The customer changed times or places before dispatch; new places or a new pickup time start
    scheduling round `round` (a new deadline alone keeps the round)."""

    type = "delivery.rescheduled"
    version = 1
    delivery_id: UUID
    round: int
    pickup: Location
    dropoff: Location
    pickup_time: datetime
    deadline: datetime | None = None
    weight_kg: float
    priority: Literal["normal", "high"]
    locations_changed: bool


class DeliveryStatusChanged(Event):
    """Published on every change of a delivery's status, after the event that tells why, in the same
    transaction: what an outside system is told as it happens (webhooks). The status and its reason are
    those of docs/api.md's "Status values"; the rest is the status resource at that moment (a delivery
    failed as `unprocessable` has its row left unread, so these are None). `change_number` counts the
    delivery's changes, 1 (`requested`), 2, 3 and so on with no gap: a subscriber that has heard 2
    and 4 knows 3 is on its way. Absent from the changes published before they were numbered; a
    delivery in flight then numbers its next change 1."""

    type = "delivery.status_changed"
    version = 1
    delivery_id: UUID
    customer_id: UUID
    status: str
    status_reason: str = ""
    change_number: int | None = None
    changed_at: datetime
    last_known_location: Location | None = None
    pickup_eta: datetime | None = None
    delivery_eta: datetime | None = None
