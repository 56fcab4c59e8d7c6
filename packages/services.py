"""Package use cases: each one transaction, its events inside it."""

from uuid import UUID

from django.conf import settings

from outbox.api import atomic, connection_of, insert_row, locked_row, publish, save_fields
from packages.events import PackageCancelled, PackageReady, PackageRejected
from packages.models import Package

connection = connection_of("packages")  # its database, wherever the settings put it


def _stream(delivery_id: UUID) -> str:
    return f"package:{delivery_id}"


def fitness_problem(*, size: str, weight_kg: float) -> str | None:
    """Why a package cannot fly (a reason code), or None; limits come from PACKAGE_MAX_WEIGHT_KG."""
    limits: dict[str, float] = settings.PACKAGE_MAX_WEIGHT_KG
    if size not in limits:
        return "invalid_size"
    if weight_kg <= 0:
        return "invalid_weight"
    if weight_kg > limits[size]:
        return "too_heavy"
    return None


def register_package(*, delivery_id: UUID, package_id: UUID, size: str, weight_kg: float, tag: str = "") -> Package:
    """Create the delivery's package and say whether it can fly; a repeated request changes nothing."""
    with atomic("packages"):
        existing = locked_row(Package, delivery_id)
        if existing is not None:  # the same request again, or a delivery that already ended
            return existing
        reason = fitness_problem(size=size, weight_kg=weight_kg)
        package = Package(
            delivery_id=delivery_id,
            package_id=package_id,
            size=size,
            weight_kg=weight_kg,
            tag=tag,
            status=Package.Status.REJECTED if reason else Package.Status.READY,
            reason=reason or "",
        )
        insert_row(package)
        if reason:
            publish(
                PackageRejected(delivery_id=delivery_id, package_id=package_id, reason=reason),
                stream=_stream(delivery_id),
            )
        else:
            publish(
                PackageReady(delivery_id=delivery_id, package_id=package_id, size=size, weight_kg=weight_kg),
                stream=_stream(delivery_id),
            )
        return package


def mark_in_transit(*, delivery_id: UUID) -> None:
    """A ready package left with its drone."""
    with atomic("packages"):
        _set_status(delivery_id, Package.Status.IN_TRANSIT, moved_from=(Package.Status.READY,))


def mark_delivered(*, delivery_id: UUID) -> None:
    """The delivery completed: its package arrived, unless it was cancelled meanwhile (or never
    flew: rejected). From ready too: this context's handlers are not ordered, and the completion
    may be handled before the dispatch."""
    with atomic("packages"):
        _set_status(delivery_id, Package.Status.DELIVERED, moved_from=(Package.Status.READY, Package.Status.IN_TRANSIT))


def _set_status(delivery_id: UUID, to: str, *, moved_from: tuple[str, ...]) -> None:
    """`Package.objects.filter(delivery_id=…, status__in=moved_from).update(status=to)` (no
    `updated_at`, as with the ORM's `update()`), written as SQL: every delivery runs both, and
    Django built each UPDATE anew at more CPU than PostgreSQL spent running it (docs/performance.md)."""
    key = Package._meta.pk.get_db_prep_value(delivery_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(Package._meta.db_table)} SET status = %s "
            f"WHERE delivery_id = %s AND status IN ({', '.join('%s' for _ in moved_from)})",
            [to, key, *moved_from],
        )


def cancel_package(*, delivery_id: UUID, reason: str) -> Package:
    """Compensation for a failed or cancelled delivery; idempotent.

    A delivery that ended before its package was registered leaves a cancelled tombstone,
    so the late `delivery.requested` cannot make a package ready again.
    """
    with atomic("packages"):
        package, created = Package.objects.select_for_update().get_or_create(
            delivery_id=delivery_id, defaults={"status": Package.Status.CANCELLED, "reason": reason}
        )
        if created or package.status in (Package.Status.CANCELLED, Package.Status.DELIVERED):
            return package
        was_ready = package.status in (Package.Status.READY, Package.Status.IN_TRANSIT)
        package.status, package.reason = Package.Status.CANCELLED, reason
        save_fields(package, ["status", "reason", "updated_at"])
        if was_ready:
            publish(
                PackageCancelled(delivery_id=delivery_id, package_id=package.package_id, reason=reason),
                stream=_stream(delivery_id),
            )
        return package
