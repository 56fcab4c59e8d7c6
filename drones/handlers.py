"""What the drone scheduler listens to; each handler hands over to one service."""

from datetime import datetime
from typing import Literal
from uuid import UUID

from drones import services
from drones.geography import Point
from outbox.api import Reader, Received, subscribe


class Location(Reader):
    latitude: float
    longitude: float
    altitude: float | None = None


class PackageInfo(Reader):
    weight_kg: float


class DeliveryRequested(Reader):
    delivery_id: UUID
    pickup: Location
    dropoff: Location
    package: PackageInfo
    priority: Literal["normal", "high"]
    pickup_time: datetime | None = None
    deadline: datetime | None = None


class DeliveryEvent(Reader):
    delivery_id: UUID
    reason: str = ""


def _point(location: Location) -> Point:
    return Point(location.latitude, location.longitude, location.altitude or 0.0)


@subscribe("drones", "delivery.requested", reader=DeliveryRequested, versions=(2,))
def on_delivery_requested(message: Received[DeliveryRequested]) -> None:
    p = message.payload
    services.schedule_drone(
        delivery_id=p.delivery_id,
        pickup=_point(p.pickup),
        dropoff=_point(p.dropoff),
        weight_kg=p.package.weight_kg,
        priority=p.priority,
        pickup_time=p.pickup_time,
        deadline=p.deadline,
    )


@subscribe("drones", "delivery.dispatched", reader=DeliveryEvent)
def on_delivery_dispatched(message: Received[DeliveryEvent]) -> None:
    services.start_flight(delivery_id=message.payload.delivery_id)


@subscribe("drones", "delivery.completed", reader=DeliveryEvent)
def on_delivery_completed(message: Received[DeliveryEvent]) -> None:
    services.release_drone(delivery_id=message.payload.delivery_id, reason="delivered")


@subscribe("drones", "delivery.failed", reader=DeliveryEvent, compensation=True)
def on_delivery_failed(message: Received[DeliveryEvent]) -> None:
    services.release_drone(delivery_id=message.payload.delivery_id, reason=message.payload.reason or "delivery_failed")


@subscribe("drones", "delivery.cancelled", reader=DeliveryEvent, compensation=True)
def on_delivery_cancelled(message: Received[DeliveryEvent]) -> None:
    services.release_drone(delivery_id=message.payload.delivery_id, reason="delivery_cancelled")


class DeliveryRescheduled(Reader):
    delivery_id: UUID
    round: int
    pickup: Location
    dropoff: Location
    weight_kg: float
    priority: Literal["normal", "high"] = "normal"
    pickup_time: datetime | None = None
    deadline: datetime | None = None


@subscribe("drones", "delivery.rescheduled", reader=DeliveryRescheduled)
def on_delivery_rescheduled(message: Received[DeliveryRescheduled]) -> None:
    p = message.payload
    services.reschedule_drone(
        delivery_id=p.delivery_id,
        round=p.round,
        pickup=_point(p.pickup),
        dropoff=_point(p.dropoff),
        weight_kg=p.weight_kg,
        priority=p.priority,
        pickup_time=p.pickup_time,
        deadline=p.deadline,
        change=message.envelope.sequence,
    )


class ReservationDue(Reader):
    delivery_id: UUID
    round: int


@subscribe("drones", "drone.reservation_due", reader=ReservationDue)
def on_reservation_due(message: Received[ReservationDue]) -> None:
    services.reserve_planned(delivery_id=message.payload.delivery_id, round=message.payload.round)


class ReturnedToBase(Reader):
    drone_id: UUID
    mission: int


@subscribe("drones", "drone.returned_to_base", reader=ReturnedToBase)
def on_returned_to_base(message: Received[ReturnedToBase]) -> None:
    services.park_at_base(drone_id=message.payload.drone_id, mission=message.payload.mission)


class FleetCheckDue(Reader):
    generation: int


@subscribe("drones", "drone.fleet_check_due", reader=FleetCheckDue)
def on_fleet_check_due(message: Received[FleetCheckDue]) -> None:
    services.check_fleet(generation=message.payload.generation)
