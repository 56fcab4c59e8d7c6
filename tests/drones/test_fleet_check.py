"""The fleet check's timer chain: it goes on while deliveries wait, for as long as they wait."""

from django.conf import settings

from drones import services
from drones.models import Drone, FleetCheck
from outbox.handling.dispatch import Outcome, dispatch
from outbox.models import DeadLetter, OutboxMessage
from outbox.testing import run_choreography
from tests.factories import BASE


def pending_check() -> OutboxMessage:
    (row,) = OutboxMessage.objects.filter(type="drone.fleet_check_due", published_at__isnull=True)
    return row


def test_the_chain_outlives_the_hop_bound_while_a_delivery_waits(customer, db):
    services.seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    services.ground_drone(drone_id=Drone.objects.get().pk)  # nobody can serve the line
    response = customer.request()
    delivery_id = response.json()["deliveryId"]
    run_choreography(correlation_id=delivery_id)

    for _ in range(settings.OUTBOX_MAX_HOPS + 4):  # more links than a causal chain may have hops
        row = pending_check()
        OutboxMessage.objects.filter(pk=row.pk).update(published_at=row.available_at)  # relayed
        assert dispatch(subscriber="drones", body=row.envelope()) is Outcome.PROCESSED

    assert not DeadLetter.objects.exists()  # no loop_detected
    assert pending_check().payload == {"generation": FleetCheck.objects.get().generation}


def test_the_chain_ends_with_the_line_and_the_next_wait_starts_it_again(customer, db):
    services.seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    drone = Drone.objects.get()
    services.ground_drone(drone_id=drone.pk)
    delivery_id = customer.request().json()["deliveryId"]
    run_choreography(correlation_id=delivery_id)
    first = pending_check()
    OutboxMessage.objects.filter(pk=first.pk).update(published_at=first.available_at)
    services.return_drone_to_service(drone_id=drone.pk)  # the line empties

    assert dispatch(subscriber="drones", body=first.envelope()) is Outcome.PROCESSED

    assert not OutboxMessage.objects.filter(type="drone.fleet_check_due", published_at__isnull=True).exists()
    assert FleetCheck.objects.get().due_at is None
