"""A package's status moves only from where each move may start: its handlers are not ordered,
and a late `delivery.dispatched` or `delivery.completed` must not bring an ended package back."""

import uuid

import pytest

from packages import services
from packages.models import Package

pytestmark = pytest.mark.django_db


def a_package(*, weight_kg: float = 1.5) -> uuid.UUID:
    delivery_id = uuid.uuid4()
    services.register_package(delivery_id=delivery_id, package_id=uuid.uuid4(), size="Small", weight_kg=weight_kg)
    return delivery_id


def cancelled() -> uuid.UUID:
    delivery_id = a_package()
    services.cancel_package(delivery_id=delivery_id, reason="delivery_cancelled")
    return delivery_id


def rejected() -> uuid.UUID:
    return a_package(weight_kg=50)  # over the Small limit


def state(delivery_id: uuid.UUID) -> tuple[str, str]:
    package = Package.objects.get(delivery_id=delivery_id)
    return package.status, package.reason


@pytest.mark.parametrize("move", [services.mark_in_transit, services.mark_delivered], ids=lambda move: move.__name__)
@pytest.mark.parametrize(
    ("ended", "expected"),
    [(cancelled, ("cancelled", "delivery_cancelled")), (rejected, ("rejected", "too_heavy"))],
    ids=["cancelled", "rejected"],
)
def test_a_late_move_of_a_package_that_ended_changes_nothing(ended, expected, move):
    delivery_id = ended()
    assert state(delivery_id) == expected

    move(delivery_id=delivery_id)

    assert state(delivery_id) == expected


def test_a_ready_package_goes_in_transit_then_delivered():
    delivery_id = a_package()
    services.mark_in_transit(delivery_id=delivery_id)
    assert state(delivery_id) == ("in_transit", "")
    services.mark_delivered(delivery_id=delivery_id)
    assert state(delivery_id) == ("delivered", "")


def test_a_completion_before_its_dispatch_delivers_and_the_late_dispatch_changes_nothing():
    delivery_id = a_package()
    services.mark_delivered(delivery_id=delivery_id)
    assert state(delivery_id) == ("delivered", "")
    services.mark_in_transit(delivery_id=delivery_id)
    assert state(delivery_id) == ("delivered", "")
