"""Proof of delivery: a task token issued on arrival, redeemed once by whoever confirms, or the
timer that fails the delivery when nobody does.

Only the token's SHA-256 is stored, as for customers' API tokens: the database, its backups and the
console's auditors never see a token that opens anything. The customer gets the token itself once,
in the answer that issues it (`issue_confirmation_token`); asking again replaces it.
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID, uuid4

from django.conf import settings
from django.utils import timezone

from deliveries.events import DeliveryCompleted, DeliveryConfirmationRequested, DeliveryConfirmationTimedOut
from deliveries.models import Customer, Delivery
from deliveries.transitions import NotYet, Status, TooLate, announce, fail, locked
from outbox.api import atomic, save_fields

AWAITED = ("confirmation_token_id", "confirmation_token_hash")  # what await_confirmation sets beside the status


def await_confirmation(delivery: Delivery) -> None:
    delivery.status = Status.AWAITING_CONFIRMATION
    delivery.confirmation_token_id, delivery.confirmation_token_hash = uuid4(), ""  # issued when asked for
    token_id, kind = delivery.confirmation_token_id, delivery.confirmation_required
    timeout = timezone.now() + timedelta(seconds=settings.DELIVERY_CONFIRMATION_TIMEOUT_SECONDS)
    announce(
        delivery,
        DeliveryConfirmationRequested(delivery_id=delivery.id, token_id=token_id, confirmation_type=kind),
        timers=[(DeliveryConfirmationTimedOut(delivery_id=delivery.id, token_id=token_id), timeout)],
    )


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_confirmation_token(*, delivery_id: UUID, customer: Customer) -> str:
    """A new task token for a delivery awaiting confirmation, returned once and stored as a hash;
    any token issued before it stops working."""
    with atomic("deliveries"):
        delivery = Delivery.objects.select_for_update().get(id=delivery_id, customer=customer)
        if delivery.status != Status.AWAITING_CONFIRMATION:
            if delivery.confirmation_required == "None":
                raise NotYet(
                    "a delivery requested with confirmationRequired None is never given a confirmation token",
                    "no_confirmation_required",
                )
            if delivery.status in (*Delivery.BEFORE_DISPATCH, Status.IN_TRANSIT):
                raise NotYet(
                    f"the delivery is {delivery.status}: its drone has not reached the drop-off, so it cannot "
                    "be given a confirmation token yet; ask again once it is awaiting_confirmation",
                    "not_yet_arrived",
                )
            raise TooLate(delivery.status, "given a confirmation token")
        token = secrets.token_urlsafe(32)
        delivery.confirmation_token_hash = _digest(token)
        save_fields(delivery, ["confirmation_token_hash", "updated_at"])
        return token


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
    with atomic("deliveries"):
        delivery = Delivery.objects.select_for_update().get(id=delivery_id, customer=customer)
        if delivery.status != Status.AWAITING_CONFIRMATION:
            raise TooLate(delivery.status, "confirmed")
        stored = delivery.confirmation_token_hash
        if not stored or not hmac.compare_digest(_digest(confirmation.token), stored):
            raise WrongToken(
                "not this delivery's current confirmation token: asking for a token replaces the one before"
            )
        if confirmation.confirmation_type != delivery.confirmation_required:
            raise WrongConfirmationType(
                f"this delivery asks for {delivery.confirmation_required}, not {confirmation.confirmation_type}"
            )
        delivery.status, delivery.confirmation_token_hash = Status.DELIVERED, ""  # used: it opens nothing again
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
    with atomic("deliveries"):
        delivery = locked(delivery_id)
        if delivery is None or delivery.status != Status.AWAITING_CONFIRMATION:
            return delivery
        if delivery.confirmation_token_id != token_id:
            return delivery
        delivery.confirmation_token_hash = ""
        fail(delivery, "confirmation_timeout")
        delivery.save()
        return delivery
