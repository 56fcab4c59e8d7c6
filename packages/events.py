"""The contracts the packages context publishes."""

from uuid import UUID

from outbox.api import Event


class PackageReady(Event):
    type = "package.ready"
    version = 1
    delivery_id: UUID
    package_id: UUID
    size: str
    weight_kg: float


class PackageRejected(Event):
    """`reason`: too_heavy, invalid_size or invalid_weight."""

    type = "package.rejected"
    version = 1
    delivery_id: UUID
    package_id: UUID
    reason: str


class PackageCancelled(Event):
    """Compensation done: the package will not fly."""

    type = "package.cancelled"
    version = 1
    delivery_id: UUID
    package_id: UUID
    reason: str
