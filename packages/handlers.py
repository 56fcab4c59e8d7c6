"""What the packages context listens to; each handler hands over to one service."""

from uuid import UUID

from outbox.api import Reader, Received, subscribe
from packages import services


class PackageInfo(Reader):
    package_id: UUID
    size: str
    weight_kg: float
    tag: str | None = None


class DeliveryRequested(Reader):
    delivery_id: UUID
    package: PackageInfo


class DeliveryEvent(Reader):
    delivery_id: UUID
    reason: str = ""


@subscribe("packages", "delivery.requested", reader=DeliveryRequested, versions=(1, 2))
def on_delivery_requested(message: Received[DeliveryRequested]) -> None:
    p = message.payload
    services.register_package(
        delivery_id=p.delivery_id,
        package_id=p.package.package_id,
        size=p.package.size,
        weight_kg=p.package.weight_kg,
        tag=p.package.tag or "",
    )


@subscribe("packages", "delivery.dispatched", reader=DeliveryEvent)
def on_delivery_dispatched(message: Received[DeliveryEvent]) -> None:
    services.mark_in_transit(delivery_id=message.payload.delivery_id)


@subscribe("packages", "delivery.completed", reader=DeliveryEvent)
def on_delivery_completed(message: Received[DeliveryEvent]) -> None:
    services.mark_delivered(delivery_id=message.payload.delivery_id)


@subscribe("packages", "delivery.failed", reader=DeliveryEvent, compensation=True)
def on_delivery_failed(message: Received[DeliveryEvent]) -> None:
    services.cancel_package(delivery_id=message.payload.delivery_id, reason=message.payload.reason or "delivery_failed")


@subscribe("packages", "delivery.cancelled", reader=DeliveryEvent, compensation=True)
def on_delivery_cancelled(message: Received[DeliveryEvent]) -> None:
    services.cancel_package(delivery_id=message.payload.delivery_id, reason="delivery_cancelled")
