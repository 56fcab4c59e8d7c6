"""The contracts the drone scheduler publishes."""

from datetime import datetime
from uuid import UUID

from outbox.contracts import Event


class DroneScheduled(Event):
    type = "drone.scheduled"
    version = 1
    delivery_id: UUID
    drone_id: UUID
    eta: datetime
    round: int = 1  # which scheduling of the delivery this answers (a reschedule starts the next)


class DroneUnavailable(Event):
    """`reason`: no_drone_available, payload_exceeds_fleet or out_of_range."""

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


class DroneGrounded(Event):
    """An operator took the drone out of service (maintenance)."""

    type = "drone.grounded"
    version = 1
    drone_id: UUID


class DroneReturnedToService(Event):
    type = "drone.returned_to_service"
    version = 1
    drone_id: UUID
