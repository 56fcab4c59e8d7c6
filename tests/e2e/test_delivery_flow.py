"""The whole choreography on the real database and broker: API, relay, worker, every context."""

import threading
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import dramatiq
import pytest
from django.db import connection
from django.utils import timezone

from deliveries.models import Delivery
from drones.models import Assignment, Drone
from drones.services import seed_fleet
from notifications.models import Notification
from outbox.models import DeadLetter, OutboxMessage
from outbox.relaying.relay import Relay
from tests.factories import BASE, Customer, delivery_request
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def all_terminal(count: int) -> bool:
    return Delivery.objects.filter(status__in=Delivery.TERMINAL).count() == count


def test_one_delivery_is_delivered_end_to_end(system):
    seed_fleet(count=2, latitude=BASE[0], longitude=BASE[1])
    alice = Customer("alice")

    delivery_id = alice.request().json()["deliveryId"]

    wait_until(
        lambda: alice.get(f"/deliveries/{delivery_id}/status").json()["status"] == "delivered",
        what="the delivery to be delivered",
    )
    status = alice.get(f"/deliveries/{delivery_id}/status").json()
    assert status["lastKnownLocation"]["latitude"] == pytest.approx(BASE[0] - 0.01)
    wait_until(lambda: Drone.objects.filter(status="available").count() == 2, what="the drone to be released")
    wait_until(
        lambda: Notification.objects.filter(delivery_id=delivery_id).count() == 2,
        what="dispatched and completed notifications",
    )
    timeline = alice.get(f"/deliveries/{delivery_id}/timeline").json()
    types = [e["type"] for e in timeline]
    assert types[:1] == ["delivery.requested"] and "delivery.dispatched" in types and "drone.released" in types
    assert not DeadLetter.objects.exists()


def drone_double_bookings() -> list[str]:
    """Walk each drone's history: a drone scheduled while still taken is a double booking.

    Both events are appended while the drone's row is locked, so for one drone the outbox id
    order is the order in which it was taken and given back.
    """
    problems, holder = [], defaultdict(lambda: None)
    events = OutboxMessage.objects.filter(type__in=["drone.scheduled", "drone.released"], target_subscriber="")
    for event in events.order_by("id"):
        drone, delivery = event.payload["drone_id"], event.payload["delivery_id"]
        if event.type == "drone.scheduled":
            if holder[drone] is not None:
                problems.append(f"drone {drone} scheduled for {delivery} while held by {holder[drone]}")
            holder[drone] = delivery
        elif holder[drone] == delivery:
            holder[drone] = None
    return problems


@pytest.mark.slow
def test_200_concurrent_requests_against_20_drones_are_all_delivered_and_never_double_book(system):
    seed_fleet(count=20, latitude=BASE[0], longitude=BASE[1])
    customers = [Customer(f"customer-{i}") for i in range(8)]

    def request(i: int) -> int:
        try:
            return customers[i % 8].request(delivery_request()).status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = Counter(pool.map(request, range(200)))

    assert answers == {202: 200}
    wait_until(lambda: all_terminal(200), timeout=180, what="all 200 deliveries to end")
    assert Counter(Delivery.objects.values_list("status", flat=True)) == {"delivered": 200}  # ten times the fleet
    assert OutboxMessage.objects.filter(type="drone.wait_listed").count() >= 180
    assert drone_double_bookings() == []
    wait_until(
        lambda: Drone.objects.filter(status="available", delivery_id=None).count() == 20,
        what="every drone to be released",
    )
    assert not DeadLetter.objects.exists()


def test_a_rejected_package_fails_the_delivery_and_its_drone_is_released(system):
    seed_fleet(count=2, latitude=BASE[0], longitude=BASE[1])
    alice = Customer("alice")

    delivery_id = alice.request(delivery_request(packageInfo={"size": "Small", "weight": 4})).json()["deliveryId"]

    wait_until(lambda: Delivery.objects.get(id=delivery_id).status == "failed", what="the delivery to fail")
    assert Delivery.objects.get(id=delivery_id).status_reason == "too_heavy"
    # Whether the drone was reserved before the failure reached the scheduler or not, it ends released.
    wait_until(
        lambda: Assignment.objects.filter(delivery_id=delivery_id, status="released").exists(),
        what="the drone assignment to be released",
    )
    wait_until(lambda: Drone.objects.filter(status="available").count() == 2, what="both drones free")


def test_no_drone_fails_the_delivery_and_its_package_is_cancelled(system):
    alice = Customer("alice")  # no fleet

    delivery_id = alice.request().json()["deliveryId"]

    wait_until(
        lambda: Delivery.objects.get(id=delivery_id).compensations == ["package_cancelled"],
        what="the package to be cancelled",
    )
    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", "payload_exceeds_fleet")


def test_a_cancel_before_anything_ran_leaves_no_drone_reserved(start_relay):
    seed_fleet(count=2, latitude=BASE[0], longitude=BASE[1])
    alice = Customer("alice")
    delivery_id = alice.request().json()["deliveryId"]
    assert alice.cancel(delivery_id).status_code == 202  # nothing relayed yet: certainly before dispatch

    start_relay()

    wait_until(
        lambda: (
            not OutboxMessage.objects.filter(published_at__isnull=True, available_at__lte=timezone.now()).exists()
            and Notification.objects.filter(delivery_id=delivery_id, kind="cancelled").exists()
        ),
        what="the request and the cancellation to be processed",
    )
    wait_until(lambda: Drone.objects.filter(status="available").count() == 2, what="no drone left reserved")
    assert Delivery.objects.get(id=delivery_id).status == "cancelled"


def test_with_the_scheduler_down_the_join_times_out_and_its_late_drone_is_released(broker, transactional_db, settings):
    """The drones queue has no worker: the join times out; when the scheduler returns, nothing stays booked."""
    settings.DELIVERY_JOIN_TIMEOUT_SECONDS = 1
    seed_fleet(count=2, latitude=BASE[0], longitude=BASE[1])
    everyone_but_drones = {q for q in broker.get_declared_queues() if not q.endswith("drones")}
    others = dramatiq.Worker(broker, queues=everyone_but_drones, worker_threads=4, worker_timeout=100)
    others.start()
    stop = threading.Event()
    relay = threading.Thread(target=lambda: (Relay(broker=broker).run(stop=stop), connection.close()), daemon=True)
    relay.start()
    scheduler = None
    try:
        delivery_id = Customer("alice").request().json()["deliveryId"]
        wait_until(
            lambda: Delivery.objects.get(id=delivery_id).status_reason == "join_timeout", what="the join to time out"
        )
        wait_until(
            lambda: Delivery.objects.get(id=delivery_id).compensations == ["package_cancelled"],
            what="the package to be cancelled",
        )

        scheduler = dramatiq.Worker(
            broker,
            queues={q for q in broker.get_declared_queues() if q.endswith("drones")},
            worker_threads=2,
            worker_timeout=100,
        )
        scheduler.start()
        wait_until(
            lambda: Assignment.objects.filter(delivery_id=delivery_id, status="released").exists(),
            what="the late scheduler to leave the drone released",
        )
    finally:
        stop.set()
        relay.join(10)
        for worker in (others, scheduler):
            if worker:
                worker.stop(timeout=10_000)
    assert Drone.objects.filter(status="available").count() == 2
    assert Delivery.objects.get(id=delivery_id).status == "failed"
