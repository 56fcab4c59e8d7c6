"""API customers and their bearer tokens: another aggregate, which publishes no events.

A token is shown once and stored only hashed, with its first characters to tell tokens apart.
"""

import secrets
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from deliveries.models import Customer, CustomerToken
from outbox.api import atomic


def create_customer(*, name: str, expires_in_days: float | None = None) -> tuple[Customer, str]:
    """Create a customer and return its bearer token, which is shown once and stored only hashed."""
    with atomic("deliveries"):
        customer = Customer.objects.create(name=name)
        _, token = issue_token(customer, expires_in_days=expires_in_days)
    return customer, token


def issue_token(customer: Customer, *, expires_in_days: float | None) -> tuple[CustomerToken, str]:
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
    with atomic("deliveries"):
        old = CustomerToken.objects.select_for_update().filter(customer=customer, revoked_at__isnull=True)
        if grace_minutes > 0:
            ends = now + timedelta(minutes=grace_minutes)
            old.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=ends)).update(expires_at=ends)
        else:
            old.update(revoked_at=now)
        return issue_token(customer, expires_in_days=expires_in_days)


def revoke_customer_tokens(*, customer: Customer) -> int:
    """Every token of the customer stops working now; the rows stay, for the record."""
    with atomic("deliveries"):
        return CustomerToken.objects.filter(customer=customer, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
