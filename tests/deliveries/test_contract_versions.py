"""delivery.requested v2 adds `priority`; a v1 message still queued is upcast and processed."""

from uuid import UUID, uuid4

from django.db import transaction
from django.utils import timezone

from deliveries.events import DeliveryRequestedV1, Location, PackageInfo
from drones.models import Assignment
from outbox.core.envelope import Envelope
from outbox.core.publishing import publish
from outbox.testing import deliver, published
from packages.models import Package


def a_v1_request(*, expedited: bool) -> Envelope:
    """A delivery.requested v1, as a publisher of before v2 left it in the outbox."""
    delivery_id = uuid4()
    with transaction.atomic():
        publish(
            DeliveryRequestedV1(
                delivery_id=delivery_id,
                pickup=Location(latitude=47.63, longitude=-122.35),
                dropoff=Location(latitude=47.61, longitude=-122.34),
                pickup_time=timezone.now(),
                expedited=expedited,
                package=PackageInfo(package_id=uuid4(), size="Small", weight_kg=1.0),
            ),
            stream=f"delivery:{delivery_id}",
            correlation_id=delivery_id,
        )
    [envelope] = published(correlation_id=delivery_id)
    return envelope


def test_a_v1_request_is_upcast_for_the_scheduler_that_reads_only_v2(fleet):
    v1 = a_v1_request(expedited=True)
    assert v1.version == 1 and "priority" not in v1.payload

    assert deliver("drones", v1).outcome == "processed"

    assignment = Assignment.objects.get(delivery_id=UUID(v1.payload["delivery_id"]))
    assert (assignment.status, assignment.priority) == ("reserved", "high")


def test_a_consumer_that_reads_both_versions_takes_v1_as_it_is(db):
    v1 = a_v1_request(expedited=False)

    assert deliver("packages", v1).outcome == "processed"

    assert Package.objects.get(delivery_id=UUID(v1.payload["delivery_id"])).status == "ready"


def test_consumers_ignore_fields_they_do_not_know(fleet):
    v1 = a_v1_request(expedited=False)
    v2 = {**v1.payload, "priority": "normal", "carbon_offset": True}

    assert deliver("drones", "delivery.requested", v2, version=2).outcome == "processed"
    assert deliver("packages", "delivery.requested", v2, version=2).outcome == "processed"


def test_new_requests_are_published_as_v2(customer):
    customer.request()
    assert [e.version for e in published("delivery.requested")] == [2]
