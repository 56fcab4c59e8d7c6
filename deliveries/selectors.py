"""Reads the API needs: a customer's own deliveries, and one delivery's timeline."""

from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from deliveries.models import Customer, CustomerToken, Delivery
from outbox.api import connection_of, correlation_timeline

connection = connection_of("deliveries")  # its database, wherever the settings put it


def deliveries_of(customer: Customer) -> QuerySet[Delivery]:
    return Delivery.objects.filter(customer=customer).order_by("-created_at", "-id")


def delivery_of(customer: Customer, delivery_id: UUID) -> Delivery | None:
    """The customer's delivery, or None: another customer's delivery does not exist for them."""
    return Delivery.objects.filter(customer=customer, id=delivery_id).first()


def overdue_deliveries() -> QuerySet[Delivery]:
    """In transit more than DELIVERY_OVERDUE_AFTER_SECONDS past the ETA, in transit that long
    without a drone (its drone was grounded after it left), awaiting a confirmation that long
    past its timeout, or not dispatched that long past its deadline (whose timer fails it); oldest first.

    A query, not a timer: it flags a delivery whose every later event was lost as well.
    """
    late = timezone.now() - timedelta(seconds=settings.DELIVERY_OVERDUE_AFTER_SECONDS)
    unconfirmed = late - timedelta(seconds=settings.DELIVERY_CONFIRMATION_TIMEOUT_SECONDS)
    return Delivery.objects.filter(
        Q(status=Delivery.Status.IN_TRANSIT, eta__lt=late)
        | Q(status=Delivery.Status.IN_TRANSIT, drone_id__isnull=True, updated_at__lt=late)
        | Q(status=Delivery.Status.AWAITING_CONFIRMATION, updated_at__lt=unconfirmed)
        | Q(status__in=Delivery.BEFORE_DISPATCH, deadline__lt=late)
    ).order_by(Coalesce("eta", "deadline", "updated_at"))


def timeline(delivery: Delivery, *, scheduled: bool = False) -> list[dict]:
    """The delivery's events (with `scheduled`, its timers still to fire): its id is the
    correlation id of everything it caused.

    An event caused by another story (a drone freed by someone else's delivery taking this one)
    names no cause here: that message is not this customer's to see.
    """
    events = correlation_timeline(delivery.id, scheduled=scheduled)
    own = {event["message_id"] for event in events}
    return [
        {**event, "causation_id": event["causation_id"] if event["causation_id"] in own else None} for event in events
    ]


def customer_with_token(token: str) -> Customer | None:
    """The customer a bearer token belongs to, if the token is neither revoked nor expired.

    Written as SQL (docs/architecture.md says when): every API request is authenticated here,
    and the ORM spent more CPU building this join than PostgreSQL spent running it."""
    now = CustomerToken._meta.get_field("expires_at").get_db_prep_value(timezone.now(), connection)
    return next(iter(Customer.objects.raw(_CUSTOMER_WITH_TOKEN, [CustomerToken.hash_token(token), now])), None)


_CUSTOMER_WITH_TOKEN = (
    f'SELECT customer.* FROM "{Customer._meta.db_table}" customer '
    f'JOIN "{CustomerToken._meta.db_table}" token '
    f'ON token."{CustomerToken._meta.get_field("customer").column}" = customer."{Customer._meta.pk.column}" '
    "WHERE token.token_hash = %s AND token.revoked_at IS NULL AND (token.expires_at IS NULL OR token.expires_at > %s)"
)
