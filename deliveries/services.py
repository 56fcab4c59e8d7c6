"""Delivery use cases: each one transaction, its events inside it."""

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID, uuid4

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from deliveries.events import (
    DeliveryCancelled,
    DeliveryCompleted,
    DeliveryConfirmationRequested,
    DeliveryConfirmationTimedOut,
    DeliveryDeadlinePassed,
    DeliveryDispatched,
    DeliveryFailed,
    DeliveryJoinTimedOut,
    DeliveryRequested,
    DeliveryWaitTimedOut,
    Location,
    PackageInfo,
    priority_of,
)
from deliveries.models import Customer, CustomerToken, Delivery
from outbox.publishing import publish

Status = Delivery.Status


class TooLate(Exception):
    """Cancelling and rescheduling are only possible before dispatch."""

    def __init__(self, status: str, change: str):
        super().__init__(f"a delivery that is {status} can no longer be {change}")
        self.reason = f"already_{status}"


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


def announce(delivery: Delivery, event, *, at: datetime | None = None) -> None:
    """Publish on the delivery's stream; the delivery id is the correlation id of its whole story."""
    _announce_about(delivery.id, event, at=at)


def _announce_about(delivery_id: UUID, event, *, at: datetime | None = None) -> None:
    publish(event, stream=f"delivery:{delivery_id}", correlation_id=delivery_id, available_at=at)


def request_delivery(
    *,
    customer: Customer,
    request: DeliveryRequest,
    idempotency_key: str | None = None,
    answer: Callable[[Delivery], dict],
) -> tuple[Delivery, bool]:
    """Accept a request: the delivery and `delivery.requested` commit together.

    A repeated `idempotency_key` returns the first delivery (and False) and creates nothing;
    `answer` renders the reply that a repeat will be given again.
    """
    if idempotency_key:
        earlier = Delivery.objects.filter(customer=customer, idempotency_key=idempotency_key).first()
        if earlier:
            return earlier, False
    try:
        with transaction.atomic():
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
            )
            delivery.first_answer = answer(delivery)  # from the fields alone: written with them, in one INSERT
            delivery.save(force_insert=True)
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
            )
            set_timers(delivery)
            return delivery, True
    except IntegrityError:
        if not idempotency_key:
            raise
        # A concurrent request with the same key won the race.
        return Delivery.objects.get(customer=customer, idempotency_key=idempotency_key), False


def set_timers(delivery: Delivery, *, join: bool = True, deadline: bool = True) -> None:
    """Schedule the join timeout and the deadline as delayed events to this context itself."""
    if join:
        timeout = timedelta(seconds=settings.DELIVERY_JOIN_TIMEOUT_SECONDS)
        announce(
            delivery,
            DeliveryJoinTimedOut(delivery_id=delivery.id, round=delivery.schedule_round),
            at=timezone.now() + timeout,
        )
    if deadline and delivery.deadline:
        announce(
            delivery, DeliveryDeadlinePassed(delivery_id=delivery.id, deadline=delivery.deadline), at=delivery.deadline
        )


def _locked(delivery_id: UUID) -> Delivery | None:
    return Delivery.objects.select_for_update().filter(id=delivery_id).first()


def _dispatch_when_ready(delivery: Delivery) -> None:
    """The join: both halves in, in either order, exactly once."""
    if delivery.status in Delivery.BEFORE_DISPATCH and delivery.package_ready and delivery.drone_id:
        delivery.status = Status.IN_TRANSIT
        announce(
            delivery,
            DeliveryDispatched(delivery_id=delivery.id, drone_id=delivery.drone_id, package_id=delivery.package_id),
        )


def _fail(delivery: Delivery, reason: str) -> None:
    if delivery.is_terminal:
        return
    delivery.status, delivery.status_reason = Status.FAILED, reason
    announce(delivery, DeliveryFailed(delivery_id=delivery.id, reason=reason))


def fail_unprocessable_delivery(*, delivery_id: UUID, schedule_round: int | None = None) -> bool:
    """The defensive second line: a message about this delivery can never be processed. Fail the
    delivery without reading its row (which may be what cannot be read) and announce it, so the
    drone is released and the package cancelled.

    Only before dispatch: a drone in flight is not called back by a message about it that cannot
    be read (its arrival still ends the delivery, or it shows as overdue). Nor by a message of an
    older scheduling round. False if nothing was failed."""
    reason = "unprocessable"
    deliveries = Delivery.objects.filter(id=delivery_id, status__in=Delivery.BEFORE_DISPATCH)
    if schedule_round is not None:
        deliveries = deliveries.filter(schedule_round=schedule_round)
    with transaction.atomic():
        failed = deliveries.update(status=Status.FAILED, status_reason=reason, updated_at=timezone.now())
        if failed:
            _announce_about(delivery_id, DeliveryFailed(delivery_id=delivery_id, reason=reason))
    return bool(failed)


def record_package_ready(*, delivery_id: UUID) -> Delivery | None:
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is None or delivery.is_terminal:
            return delivery
        delivery.package_ready = True
        _dispatch_when_ready(delivery)
        delivery.save()
        return delivery


def record_drone_scheduled(
    *,
    delivery_id: UUID,
    drone_id: UUID,
    eta: datetime,
    pickup_eta: datetime | None = None,
    round: int = 1,
    at: datetime | None = None,
) -> Delivery | None:
    """A drone is reserved (`at`): the first half of the join, or a new drone after the last was grounded."""
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is None or delivery.is_terminal or round != delivery.schedule_round:
            return delivery  # the drone context releases it on delivery.failed/cancelled or the reschedule
        delivery.drone_id, delivery.eta, delivery.pickup_eta = drone_id, eta, pickup_eta
        delivery.drone_scheduled_at = at or timezone.now()
        if delivery.status in Delivery.BEFORE_DISPATCH:
            delivery.status, delivery.status_reason = Status.SCHEDULED, ""
        _dispatch_when_ready(delivery)
        delivery.save()
        return delivery


def record_waiting(
    *, delivery_id: UUID, round: int, reason: str, expected_pickup_at: datetime | None
) -> Delivery | None:
    """The drone scheduler put the delivery in its line (`reason`: fleet_busy or pickup_planned).

    A delivery without a deadline then gets a timer: it waits at most DELIVERY_MAX_WAIT_SECONDS
    after its pickup time. One already dispatched whose drone an operator grounded before it took
    off stays in transit, drone-less, and gets that timer whatever its deadline: the deadline no
    longer fails a delivery that has left.
    """
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is None or round != delivery.schedule_round:
            return delivery
        if delivery.status in Delivery.BEFORE_DISPATCH:
            delivery.status, delivery.status_reason = Status.WAITING_FOR_DRONE, reason
        elif delivery.status != Status.IN_TRANSIT:
            return delivery
        delivery.drone_id, delivery.eta, delivery.pickup_eta = None, None, expected_pickup_at
        if delivery.waiting_since is None:
            delivery.waiting_since = timezone.now()
            if delivery.deadline is None or delivery.status == Status.IN_TRANSIT:
                give_up_at = max(timezone.now(), delivery.pickup_time) + timedelta(
                    seconds=settings.DELIVERY_MAX_WAIT_SECONDS
                )
                announce(delivery, DeliveryWaitTimedOut(delivery_id=delivery.id, round=round), at=give_up_at)
        delivery.save()
        return delivery


def record_failure(*, delivery_id: UUID, reason: str, round: int | None = None) -> Delivery | None:
    """An upstream context refused (package rejected, no drone): fail, which triggers compensations.

    `round` is the scheduling round a refusal answers; one for a round since rescheduled is moot.
    """
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is not None and round in (None, delivery.schedule_round):
            _fail(delivery, reason)
            delivery.save()
        return delivery


def expire_join(*, delivery_id: UUID, round: int = 1) -> Delivery | None:
    """The join timer fired: a delivery one of whose contexts has not answered this round fails, compensated.

    An answer is what counts, not a free drone: a delivery in the drones' waiting line whose
    package is ready is legitimately waiting.
    """
    return _fail_if_not_dispatched(
        delivery_id,
        "join_timeout",
        still=lambda d: d.schedule_round == round and (d.status == Status.REQUESTED or not d.package_ready),
    )


def expire_wait(*, delivery_id: UUID, round: int) -> Delivery | None:
    """The longest wait for a drone is over: a delivery still in line fails with no_drone_available,
    as does one dispatched whose drone was grounded and that has not got another since."""
    with transaction.atomic():
        delivery = _locked(delivery_id)
        drone_less = delivery is not None and (
            delivery.status == Status.WAITING_FOR_DRONE
            or (delivery.status == Status.IN_TRANSIT and delivery.drone_id is None)
        )
        if drone_less and delivery.schedule_round == round:
            _fail(delivery, "no_drone_available")
            delivery.save()
        return delivery


def expire_deadline(*, delivery_id: UUID, deadline: datetime | None = None) -> Delivery | None:
    """The deadline timer fired; a timer for a deadline since moved changes nothing."""
    return _fail_if_not_dispatched(delivery_id, "deadline_missed", still=lambda d: deadline in (None, d.deadline))


def _fail_if_not_dispatched(delivery_id: UUID, reason: str, *, still: Callable[[Delivery], bool]) -> Delivery | None:
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is not None and delivery.status in Delivery.BEFORE_DISPATCH and still(delivery):
            _fail(delivery, reason)
            delivery.save()
        return delivery


def record_position(*, delivery_id: UUID, location: dict) -> Delivery | None:
    """Apply a position report (its handler is ordered: a stale report never gets here)."""
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is None or delivery.status != Status.IN_TRANSIT:
            return delivery
        delivery.last_known_location = location
        delivery.save()
        return delivery


def record_arrival(*, delivery_id: UUID, location: dict) -> Delivery | None:
    """The drone is at the drop-off: delivered, or, when a confirmation is required, waiting for
    it with a task token issued and a timer set."""
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is None or delivery.status != Status.IN_TRANSIT:
            return delivery
        delivery.last_known_location = location
        if delivery.confirmation_required == "None":
            delivery.status = Status.DELIVERED
            announce(delivery, DeliveryCompleted(delivery_id=delivery.id, drone_id=delivery.drone_id))
        else:
            _await_confirmation(delivery)
        delivery.save()
        return delivery


def _await_confirmation(delivery: Delivery) -> None:
    delivery.status = Status.AWAITING_CONFIRMATION
    delivery.confirmation_token_id, delivery.confirmation_token = uuid4(), secrets.token_urlsafe(32)
    token_id, kind = delivery.confirmation_token_id, delivery.confirmation_required
    announce(
        delivery,
        DeliveryConfirmationRequested(delivery_id=delivery.id, token_id=token_id, confirmation_type=kind),
    )
    timeout = timezone.now() + timedelta(seconds=settings.DELIVERY_CONFIRMATION_TIMEOUT_SECONDS)
    announce(delivery, DeliveryConfirmationTimedOut(delivery_id=delivery.id, token_id=token_id), at=timeout)


class WrongToken(Exception):
    """Not the delivery's task token (or one already used): nothing changes."""


class WrongConfirmationType(ValueError):
    """The delivery asked for another kind of confirmation."""


@dataclass(frozen=True)
class Confirmation:
    token: str
    confirmation_type: str
    date_time: datetime
    geo_coordinates: dict | None = None
    confirmation_blob: str | None = None


def confirm_delivery(*, delivery_id: UUID, customer: Customer, confirmation: Confirmation) -> Delivery:
    """Complete a delivery awaiting confirmation with its task token: single-use, bound to this
    delivery and to the confirmation type it asked for."""
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(id=delivery_id, customer=customer)
        if delivery.status != Status.AWAITING_CONFIRMATION:
            raise TooLate(delivery.status, "confirmed")
        if not hmac.compare_digest(confirmation.token.encode(), delivery.confirmation_token.encode()):
            raise WrongToken("not this delivery's confirmation token")
        if confirmation.confirmation_type != delivery.confirmation_required:
            raise WrongConfirmationType(
                f"this delivery asks for {delivery.confirmation_required}, not {confirmation.confirmation_type}"
            )
        delivery.status, delivery.confirmation_token = Status.DELIVERED, ""  # used: it opens nothing again
        delivery.confirmation = {
            "type": confirmation.confirmation_type,
            "dateTime": confirmation.date_time.isoformat(),
            "geoCoordinates": confirmation.geo_coordinates,
            "blob": confirmation.confirmation_blob,
            "tokenId": str(delivery.confirmation_token_id),
        }
        announce(delivery, DeliveryCompleted(delivery_id=delivery.id, drone_id=delivery.drone_id))
        delivery.save()
        return delivery


def confirmation_timed_out(*, delivery_id: UUID, token_id: UUID) -> Delivery | None:
    """No confirmation in time: failed, and the drone takes the package back (drones context)."""
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is None or delivery.status != Status.AWAITING_CONFIRMATION:
            return delivery
        if delivery.confirmation_token_id != token_id:
            return delivery
        delivery.confirmation_token = ""
        _fail(delivery, "confirmation_timeout")
        delivery.save()
        return delivery


def record_compensation(*, delivery_id: UUID, done: str) -> None:
    with transaction.atomic():
        delivery = _locked(delivery_id)
        if delivery is not None and done not in delivery.compensations:
            delivery.compensations = [*delivery.compensations, done]
            delivery.save(update_fields=["compensations", "updated_at"])


def cancel_delivery(*, delivery_id: UUID, customer: Customer | None, reason: str = "cancelled_by_customer") -> Delivery:
    """Cancel before dispatch; the drone and package contexts compensate on `delivery.cancelled`.

    `customer` None is an operator acting from the admin, on any customer's delivery.
    """
    with transaction.atomic():
        deliveries = Delivery.objects.select_for_update()
        delivery = deliveries.get(id=delivery_id, **({"customer": customer} if customer else {}))
        if delivery.status == Status.CANCELLED:
            return delivery
        if delivery.status not in Delivery.BEFORE_DISPATCH:
            raise TooLate(delivery.status, "cancelled")
        delivery.status, delivery.status_reason = Status.CANCELLED, reason
        announce(delivery, DeliveryCancelled(delivery_id=delivery.id, reason=reason))
        delivery.save()
        return delivery


def create_customer(*, name: str, expires_in_days: float | None = None) -> tuple[Customer, str]:
    """Create a customer and return its bearer token, which is shown once and stored only hashed."""
    with transaction.atomic():
        customer = Customer.objects.create(name=name)
        _, token = _issue_token(customer, expires_in_days=expires_in_days)
    return customer, token


def _issue_token(customer: Customer, *, expires_in_days: float | None) -> tuple[CustomerToken, str]:
    secret = secrets.token_urlsafe(32)
    expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days is not None else None
    token = CustomerToken.objects.create(
        customer=customer, token_hash=CustomerToken.hash_token(secret), prefix=secret[:6], expires_at=expires_at
    )
    return token, secret


def rotate_customer_token(
    *, customer: Customer, expires_in_days: float | None = None, grace_minutes: float = 0
) -> tuple[CustomerToken, str]:
    """Issue a new token; the customer's other tokens stop working at once, or after
    `grace_minutes` so that its clients can switch over. Returns the new token and its value."""
    now = timezone.now()
    with transaction.atomic():
        old = CustomerToken.objects.select_for_update().filter(customer=customer, revoked_at__isnull=True)
        if grace_minutes > 0:
            ends = now + timedelta(minutes=grace_minutes)
            old.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=ends)).update(expires_at=ends)
        else:
            old.update(revoked_at=now)
        return _issue_token(customer, expires_in_days=expires_in_days)


def revoke_customer_tokens(*, customer: Customer) -> int:
    """Every token of the customer stops working now; the rows stay, for the record."""
    with transaction.atomic():
        return CustomerToken.objects.filter(customer=customer, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
