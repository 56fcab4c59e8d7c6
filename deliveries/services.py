"""Delivery use cases from the customer and the operators: a request taken in, a cancellation,
and what other contexts report back as failed or compensated. Each one transaction, its events
inside it. The rest of the story has a module per subject: `join` (the package's and the drone's
answers), `timers`, `flight`, `confirmation` (proof of delivery), `rescheduling`, `customers`.
"""

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.db import IntegrityError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from deliveries.events import (
    DeliveryCancelled,
    DeliveryFailed,
    DeliveryRequested,
    DeliveryStatusChanged,
    Location,
    PackageInfo,
    priority_of,
)
from deliveries.models import Customer, Delivery
from deliveries.timers import timers_to_set
from deliveries.transitions import Status, TooLate, announce, announce_about, fail, locked
from outbox.api import atomic, connection_of, insert_row, save_fields

connection = connection_of("deliveries")  # its database, wherever the settings put it


@dataclass(frozen=True)
class DeliveryRequest:
    """What the customer asked for, already validated by the API."""

    pickup: dict
    dropoff: dict
    pickup_time: datetime
    deadline: datetime | None
    expedited: bool
    confirmation_required: str
    package_id: UUID
    package_size: str
    package_weight_kg: float
    package_tag: str


class IdempotencyKeyReused(ValueError):
    """The key came with a different request before: the client must not believe this one was taken."""


class IdempotencyKeyInFlight(Exception):
    """A request with the same key is still being processed: answer when it is, retry then."""


class PackageAlreadyTravelling(Exception):
    """The customer has a delivery of this package that has not ended: a package is in one place at
    a time. Once that delivery ends (delivered, failed, cancelled) the package may travel again."""


def request_delivery(
    *,
    customer: Customer,
    request: DeliveryRequest,
    idempotency_key: str | None = None,
    fingerprint: str = "",
) -> tuple[Delivery, bool]:
    """Accept a request: the delivery and `delivery.requested` commit together.

    A repeated `idempotency_key` with the same request (`fingerprint`) returns the first delivery as
    it was accepted (and False: `as_accepted`), whatever happened to it since, and creates nothing. The
    same key with a different request is refused (`IdempotencyKeyReused`), and while the first
    request with a key is still in its transaction, a second one is refused too
    (`IdempotencyKeyInFlight`): the IETF Idempotency-Key draft's 422 and 409.
    """
    if idempotency_key:
        earlier = Delivery.objects.filter(customer=customer, idempotency_key=idempotency_key).first()
        if earlier:
            return _repeated(earlier, fingerprint), False
    try:
        with atomic("deliveries"):
            if idempotency_key and not _hold_the_key(customer, idempotency_key):
                raise IdempotencyKeyInFlight("a request with this Idempotency-Key is still being processed")
            delivery = Delivery(
                customer=customer,
                pickup_location=request.pickup,
                dropoff_location=request.dropoff,
                pickup_time=request.pickup_time,
                deadline=request.deadline,
                expedited=request.expedited,
                confirmation_required=request.confirmation_required,
                package_id=request.package_id,
                package_size=request.package_size,
                package_weight_kg=request.package_weight_kg,
                package_tag=request.package_tag,
                idempotency_key=idempotency_key,
                request_fingerprint=fingerprint if idempotency_key else "",
            )
            delivery.accepted_as = {name: getattr(delivery, name) for name in ACCEPTED}  # in the one INSERT
            announce(
                delivery,
                DeliveryRequested(
                    delivery_id=delivery.id,
                    pickup=Location(**request.pickup),
                    dropoff=Location(**request.dropoff),
                    pickup_time=request.pickup_time,
                    deadline=request.deadline,
                    expedited=request.expedited,
                    priority=priority_of(expedited=request.expedited),
                    confirmation_required=request.confirmation_required,
                    package=PackageInfo(
                        package_id=request.package_id,
                        size=request.package_size,
                        weight_kg=request.package_weight_kg,
                        tag=request.package_tag or None,
                    ),
                ),
                timers=timers_to_set(delivery),
            )
            insert_row(delivery)  # after announce(), which numbers its first status change
            return delivery, True
    except IntegrityError:
        # A concurrent request with the same key committed first, or the package is on its way already.
        earlier = (
            idempotency_key and Delivery.objects.filter(customer=customer, idempotency_key=idempotency_key).first()
        )
        if earlier:
            return _repeated(earlier, fingerprint), False
        travelling = Delivery.objects.filter(customer=customer, package_id=request.package_id)
        if travelling.exclude(status__in=Delivery.TERMINAL).exists():
            raise PackageAlreadyTravelling(f"package {request.package_id} is already on a delivery of yours") from None
        raise


def _repeated(earlier: Delivery, fingerprint: str) -> Delivery:
    """The first delivery made under a key, as it was accepted, for a request that must be the
    same one again."""
    if earlier.request_fingerprint and fingerprint and earlier.request_fingerprint != fingerprint:
        raise IdempotencyKeyReused("this Idempotency-Key was used for a different request")
    return as_accepted(earlier)


# What a delivery was accepted with, kept (`accepted_as`) for a request repeated with its key: the
# answer to a repeat is the first answer, whatever a reschedule changed since.
ACCEPTED = (
    "pickup_location",
    "dropoff_location",
    "pickup_time",
    "deadline",
    "expedited",
    "confirmation_required",
    "package_id",
    "package_size",
    "package_weight_kg",
    "package_tag",
)


def as_accepted(delivery: Delivery) -> Delivery:
    """`delivery` as it was when it was accepted (an unsaved copy, never to be saved)."""
    if delivery.accepted_as is None:
        return delivery
    kept = dict(delivery.accepted_as)
    for name in ("pickup_time", "deadline"):
        kept[name] = parse_datetime(kept[name]) if kept[name] else None
    kept["package_id"] = UUID(str(kept["package_id"]))
    return Delivery(id=delivery.id, customer_id=delivery.customer_id, status=Delivery.Status.REQUESTED, **kept)


def _hold_the_key(customer: Customer, key: str) -> bool:
    """Hold the key until this transaction ends; False if another request holds it (PostgreSQL:
    an advisory lock, never waited for. SQLite serialises writers: nothing can be in flight)."""
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", [f"idempotency:{customer.pk}:{key}"]
        )
        return cursor.fetchone()[0]


def cancel_delivery(*, delivery_id: UUID, customer: Customer | None, reason: str = "cancelled_by_customer") -> Delivery:
    """Cancel before dispatch; the drone and package contexts compensate on `delivery.cancelled`.

    `customer` None is an operator acting from the admin, on any customer's delivery.
    """
    with atomic("deliveries"):
        deliveries = Delivery.objects.select_for_update()
        delivery = deliveries.get(id=delivery_id, **({"customer": customer} if customer else {}))
        if delivery.status == Status.CANCELLED:
            return delivery
        if delivery.status not in Delivery.BEFORE_DISPATCH:
            raise TooLate(delivery.status, "cancelled")
        delivery.status, delivery.status_reason = Status.CANCELLED, reason
        delivery.eta = delivery.pickup_eta = None  # no drone is coming: the times it was expected mean nothing
        announce(delivery, DeliveryCancelled(delivery_id=delivery.id, reason=reason))
        delivery.save()
        return delivery


def record_failure(*, delivery_id: UUID, reason: str, round: int | None = None) -> Delivery | None:
    """An upstream context refused (package rejected, no drone): fail, which triggers compensations.

    `round` is the scheduling round a refusal answers; one for a round since rescheduled is moot.
    """
    with atomic("deliveries"):
        delivery = locked(delivery_id)
        if delivery is not None and round in (None, delivery.schedule_round):
            fail(delivery, reason)
            delivery.save()
        return delivery


def record_compensation(*, delivery_id: UUID, done: str) -> None:
    with atomic("deliveries"):
        delivery = locked(delivery_id)
        if delivery is not None and done not in delivery.compensations:
            delivery.compensations = [*delivery.compensations, done]
            save_fields(delivery, ["compensations", "updated_at"])


def fail_unprocessable_delivery(*, delivery_id: UUID, schedule_round: int | None = None) -> bool:
    """The defensive second line: a message about this delivery can never be processed. Fail the
    delivery without reading its row (which may be what cannot be read) and announce it, so the
    drone is released and the package cancelled.

    Only before dispatch: a drone in flight is not called back by a message about it that cannot
    be read (its arrival still ends the delivery, or it shows as overdue). Nor by a message of an
    older scheduling round. False if nothing was failed.

    Its `delivery.status_changed` carries only what the row's customer id tells: nothing else is read."""
    reason = "unprocessable"
    deliveries = Delivery.objects.filter(id=delivery_id, status__in=Delivery.BEFORE_DISPATCH)
    if schedule_round is not None:
        deliveries = deliveries.filter(schedule_round=schedule_round)
    with atomic("deliveries"):
        found = list(deliveries.select_for_update().values_list("customer_id", "status_changes"))
        if not found:
            return False
        [(customer_id, changes_before)] = found
        now = timezone.now()
        deliveries.update(status=Status.FAILED, status_reason=reason, status_changes=changes_before + 1, updated_at=now)
        changed = DeliveryStatusChanged(
            delivery_id=delivery_id,
            customer_id=customer_id,
            status=Status.FAILED,
            status_reason=reason,
            change_number=changes_before + 1,
            changed_at=now,
        )
        failed = DeliveryFailed(delivery_id=delivery_id, reason=reason)
        announce_about(delivery_id, failed, ended=True, followed_by=[(changed, None)])
    return True
