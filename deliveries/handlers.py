"""What the deliveries context listens to; each handler hands over to one service."""

from datetime import datetime
from uuid import UUID

from deliveries import confirmation, flight, join, services, timers
from outbox.api import Envelope, Reader, Received, subscribe, when_unprocessable


class AboutDelivery(Reader):
    delivery_id: UUID


class Refusal(Reader):
    delivery_id: UUID
    reason: str
    round: int | None = None


class Timer(Reader):
    delivery_id: UUID
    round: int = 1
    deadline: datetime | None = None


class DroneScheduled(Reader):
    delivery_id: UUID
    drone_id: UUID
    eta: datetime
    pickup_eta: datetime | None = None
    round: int = 1


class WaitListed(Reader):
    delivery_id: UUID
    round: int
    reason: str
    expected_pickup_at: datetime | None = None


class Position(Reader):
    delivery_id: UUID
    latitude: float
    longitude: float
    altitude: float | None = None


def _location(p: Position) -> dict:
    return {"latitude": p.latitude, "longitude": p.longitude, "altitude": p.altitude}


@subscribe("deliveries", "package.ready", reader=AboutDelivery)
def on_package_ready(message: Received[AboutDelivery]) -> None:
    join.record_package_ready(delivery_id=message.payload.delivery_id)


# The scheduler's answers about one delivery share its assignment stream and are applied in order:
# a drone scheduled after the delivery waited in line is never undone by the older "waiting" news.
@subscribe("deliveries", "drone.scheduled", reader=DroneScheduled, ordered=True)
def on_drone_scheduled(message: Received[DroneScheduled]) -> None:
    p = message.payload
    join.record_drone_scheduled(
        delivery_id=p.delivery_id,
        drone_id=p.drone_id,
        eta=p.eta,
        pickup_eta=p.pickup_eta,
        round=p.round,
        at=message.envelope.occurred_at,
    )


@subscribe("deliveries", "drone.wait_listed", reader=WaitListed, ordered=True)
def on_drone_wait_listed(message: Received[WaitListed]) -> None:
    p = message.payload
    join.record_waiting(
        delivery_id=p.delivery_id, round=p.round, reason=p.reason, expected_pickup_at=p.expected_pickup_at
    )


@subscribe("deliveries", "package.rejected", reader=Refusal)
def on_package_rejected(message: Received[Refusal]) -> None:
    services.record_failure(delivery_id=message.payload.delivery_id, reason=message.payload.reason)


@subscribe("deliveries", "drone.unavailable", reader=Refusal, ordered=True)
def on_drone_unavailable(message: Received[Refusal]) -> None:
    p = message.payload
    services.record_failure(delivery_id=p.delivery_id, reason=p.reason, round=p.round or 1)


@subscribe("deliveries", "drone.position_reported", reader=Position, ordered=True)
def on_position_reported(message: Received[Position]) -> None:
    flight.record_position(delivery_id=message.payload.delivery_id, location=_location(message.payload))


# Not ordered: the arrival supersedes the flight's position reports by design (a report handled
# after it changes nothing: the delivery is no longer in transit), so it neither waits for them nor
# counts the ones it overtook as a gap.
@subscribe("deliveries", "drone.arrived", reader=Position)
def on_drone_arrived(message: Received[Position]) -> None:
    flight.record_arrival(delivery_id=message.payload.delivery_id, location=_location(message.payload))


@subscribe("deliveries", "drone.released", reader=AboutDelivery)
def on_drone_released(message: Received[AboutDelivery]) -> None:
    services.record_compensation(delivery_id=message.payload.delivery_id, done="drone_released")


@subscribe("deliveries", "drone.package_returned", reader=AboutDelivery)
def on_package_returned(message: Received[AboutDelivery]) -> None:
    services.record_compensation(delivery_id=message.payload.delivery_id, done="package_returned")


class ConfirmationTimer(Reader):
    delivery_id: UUID
    token_id: UUID


@subscribe("deliveries", "delivery.confirmation_timed_out", reader=ConfirmationTimer)
def on_confirmation_timed_out(message: Received[ConfirmationTimer]) -> None:
    confirmation.confirmation_timed_out(delivery_id=message.payload.delivery_id, token_id=message.payload.token_id)


@subscribe("deliveries", "package.cancelled", reader=AboutDelivery)
def on_package_cancelled(message: Received[AboutDelivery]) -> None:
    services.record_compensation(delivery_id=message.payload.delivery_id, done="package_cancelled")


@subscribe("deliveries", "delivery.join_timed_out", reader=Timer)
def on_join_timed_out(message: Received[Timer]) -> None:
    timers.expire_join(delivery_id=message.payload.delivery_id, round=message.payload.round)


@subscribe("deliveries", "delivery.wait_timed_out", reader=Timer)
def on_wait_timed_out(message: Received[Timer]) -> None:
    timers.expire_wait(delivery_id=message.payload.delivery_id, round=message.payload.round)


@subscribe("deliveries", "delivery.deadline_passed", reader=Timer)
def on_deadline_passed(message: Received[Timer]) -> None:
    timers.expire_deadline(delivery_id=message.payload.delivery_id, deadline=message.payload.deadline)


@when_unprocessable("deliveries")
def fail_the_delivery(envelope: Envelope) -> None:
    """A message about a delivery that can never be processed fails the delivery, whose
    compensations then release its drone and cancel its package."""
    try:
        delivery_id = UUID(str(envelope.payload.get("delivery_id")))
    except ValueError:
        return  # no delivery to fail: the dead letter alone tells the operators
    schedule_round = envelope.payload.get("round")
    services.fail_unprocessable_delivery(
        delivery_id=delivery_id, schedule_round=schedule_round if isinstance(schedule_round, int) else None
    )
