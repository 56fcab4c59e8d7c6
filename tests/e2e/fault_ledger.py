"""What a fault test of the choreography must add up to, and its figures per phase."""

import statistics

from deliveries.models import Delivery
from outbox.models import DeadLetter, OutboxMessage


def delivered_once_each(count: int) -> list[float]:
    """All `count` deliveries delivered, each `delivery.completed` once (nothing applied twice), no
    dead letter; returns each one's seconds from request to delivered, in the order requested."""
    assert not DeadLetter.objects.exists()
    assert Delivery.objects.filter(status="delivered").count() == count
    completed = OutboxMessage.objects.filter(type="delivery.completed").values_list("correlation_id", flat=True)
    assert len(completed) == len(set(completed)) == count
    return [(d.updated_at - d.created_at).total_seconds() for d in Delivery.objects.order_by("created_at")]


def median_and_max(phases: dict[str, list[float]]) -> str:
    return "; ".join(f"{name} {statistics.median(s):.1f} / {max(s):.1f}" for name, s in phases.items())
