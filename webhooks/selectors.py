"""What the webhooks context reads for its API and its admin."""

from uuid import UUID

from django.db.models import QuerySet

from webhooks.models import Attempt, Endpoint


def disabled_endpoints() -> QuerySet[Endpoint]:
    """Endpoints disabled after failing for too long: nothing goes to them until their customer enables them."""
    return Endpoint.objects.exclude(disabled_at=None)


def endpoints_of(customer_id: UUID) -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(customer_id=customer_id).order_by("created_at", "pk")


def endpoint_of(customer_id: UUID, endpoint_id: UUID) -> Endpoint | None:
    """The customer's endpoint, or None (another customer's is none of theirs)."""
    return Endpoint.objects.filter(customer_id=customer_id, pk=endpoint_id).first()


def attempts_at(endpoint: Endpoint) -> QuerySet[Attempt]:
    """Every attempt to send to the endpoint, newest first."""
    return Attempt.objects.filter(message__endpoint=endpoint).select_related("message").order_by("-attempted_at", "-pk")
