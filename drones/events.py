"""The contracts the drone scheduler publishes."""

from datetime import datetime
from uuid import UUID

from outbox.api import Event


class DroneScheduled(Event):
    type = "drone.scheduled"
    version = 1
    delivery_id: UUID
    drone_id: UUID
    eta: datetime
    round: int = 1  # which scheduling of the delivery this answers (a reschedule starts the next)
    pickup_eta: datetime | None = None  # when the drone will be at the pickup point


class DroneWaitListed(Event):
    """The delivery waits in the scheduler's line: no drone that can fly it is free (`fleet_busy`), or its
    pickup is later and a drone will be reserved in time for it (`pickup_planned`).

    `expected_pickup_at` is an estimate of when a drone will be at the pickup, None when none can be given.
    """

    type = "drone.wait_listed"
    version = 1
    delivery_id: UUID
    round: int
    reason: str
    expected_pickup_at: datetime | None = None


class DroneReservationDue(Event):
    """A timer the scheduler sets for itself: time to reserve a drone for a later pickup."""

    type = "drone.reservation_due"
    version = 1
    delivery_id: UUID
    round: int


class DroneUnavailable(Event):
    """No drone of the fleet could ever fly it: `reason` is payload_exceeds_fleet or out_of_range."""

    type = "drone.unavailable"
    version = 1
    delivery_id: UUID
    reason: str
    round: int = 1


class DronePositionReported(Event):
    type = "drone.position_reported"
    version = 1
    delivery_id: UUID
    drone_id: UUID
    latitude: float
    longitude: float
    altitude: float


class DroneArrived(Event):
    type = "drone.arrived"
    version = 1
    delivery_id: UUID
    drone_id: UUID
    latitude: float
    longitude: float


class DroneReleased(Event):
    """Compensation or end of a flight: the drone is free again."""

    type = "drone.released"
    version = 1
    delivery_id: UUID
    drone_id: UUID
    reason: str


class DronePackageReturned(Event):
    """Compensation: the delivery failed with the drone at the drop-off (no confirmation came), so
    it takes the package back with it."""

    type = "drone.package_returned"
    version = 1
    delivery_id: UUID
    drone_id: UUID
    reason: str


class DroneGrounded(Event):
    """An operator took the drone out of service (maintenance)."""

    type = "drone.grounded"
    version = 1
    drone_id: UUID


class DroneReturnedToService(Event):
    type = "drone.returned_to_service"
    version = 1
    drone_id: UUID


class DroneFleetCheckDue(Event):
    """A timer the scheduler sets for itself while deliveries wait: every free drone is offered to the
    line once more, in case the one transaction that would have matched them rolled back.

    `generation` names the chain of timers it belongs to: only the current one goes on.
    """

    type = "drone.fleet_check_due"
    version = 1
    generation: int


class DroneReturnedToBase(Event):
    """Published when a drone with nothing to do sets off home, for the moment it lands there.

    `mission` is its mission count then: if it has taken another delivery since, the return never happened.
    """

    type = "drone.returned_to_base"
    version = 1
    drone_id: UUID
    mission: int
