"""delivery.requested v2 adds `priority`; a v1 message still queued is upcast and processed."""

from uuid import UUID, uuid4

from django.db import transaction
from django.utils import timezone

from deliveries.events import DeliveryRequestedV1, Location, PackageInfo
from drones.models import Assignment
from outbox.core.publishing import publish
from outbox.handling.dispatch import Outcome, dispatch
from outbox.models import DeadLetter, OutboxMessage
from packages.models import Package


def a_v1_request(*, expedited: bool) -> OutboxMessage:
    delivery_id = uuid4()
    with transaction.atomic():
        return publish(
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


def test_a_v1_request_is_upcast_for_the_scheduler_that_reads_only_v2(fleet):
    row = a_v1_request(expedited=True)
    assert row.version == 1 and "priority" not in row.payload

    assert dispatch(subscriber="drones", body=row.envelope()) is Outcome.PROCESSED

    assignment = Assignment.objects.get(delivery_id=UUID(row.payload["delivery_id"]))
    assert (assignment.status, assignment.priority) == ("reserved", "high")
    assert not DeadLetter.objects.exists()


def test_a_consumer_that_reads_both_versions_takes_v1_as_it_is(db):
    row = a_v1_request(expedited=False)

    assert dispatch(subscriber="packages", body=row.envelope()) is Outcome.PROCESSED

    assert Package.objects.get(delivery_id=UUID(row.payload["delivery_id"])).status == "ready"


def test_consumers_ignore_fields_they_do_not_know(fleet):
    body = a_v1_request(expedited=False).envelope()
    body["version"] = 2
    body["payload"] = {**body["payload"], "priority": "normal", "carbon_offset": True}

    assert dispatch(subscriber="drones", body=body) is Outcome.PROCESSED
    assert dispatch(subscriber="packages", body=body) is Outcome.PROCESSED


def test_new_requests_are_published_as_v2(customer):
    customer.request()
    assert OutboxMessage.objects.get(type="delivery.requested").version == 2
