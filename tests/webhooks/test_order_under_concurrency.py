"""Two of a delivery's status changes heard at once by two workers, on PostgreSQL READ COMMITTED:
the second to record its change sees the first's (the delivery's HeardChanges row is locked), so the
change that fills a gap always lets the message waiting for it go."""

import threading
import uuid

import pytest
from django.db import connection, connections
from django.utils import timezone

from outbox.testing import pending
from tests.waiting import wait_until
from webhooks import services
from webhooks.models import Endpoint, HeardChanges, Message

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def a_change(customer_id, delivery_id, number: int, status: str) -> None:
    services.enqueue_status_change(
        customer_id=customer_id,
        delivery_id=delivery_id,
        status=status,
        changed_at=timezone.now(),
        sequence=number,
        change_number=number,
    )


def someone_waits_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cursor.fetchone()[0] > 0


def test_the_change_that_fills_a_gap_while_a_later_one_is_being_heard_lets_it_go(transactional_db, monkeypatch):
    customer_id, delivery_id = uuid.uuid4(), uuid.uuid4()
    Endpoint.objects.create(customer_id=customer_id, url="https://receiver.example/hooks")
    a_change(customer_id, delivery_id, 1, "requested")
    heard_3, go, errors = threading.Event(), threading.Event(), []
    hear = HeardChanges.hear

    def pausing_before_recording_change_3(heard, number):  # out of order: the row read, and locked
        if number == 3:
            heard_3.set()
            assert go.wait(10), "never let go"
        hear(heard, number)

    monkeypatch.setattr(HeardChanges, "hear", pausing_before_recording_change_3)

    def run(number, status):
        try:
            a_change(customer_id, delivery_id, number, status)
        except Exception as error:  # reported below, in the test's thread
            errors.append(error)
        finally:
            connections.close_all()

    third = threading.Thread(target=run, args=(3, "in_transit"))
    third.start()
    assert heard_3.wait(10), "change 3 was never heard"
    second = threading.Thread(target=run, args=(2, "scheduled"))
    second.start()
    wait_until(someone_waits_on_a_lock, timeout=10, what="change 2 waiting for change 3's lock")
    go.set()
    for thread in (third, second):
        thread.join(30)

    assert errors == []
    heard = HeardChanges.objects.get(pk=delivery_id)
    assert (heard.heard_through, heard.heard_beyond) == (3, None)
    announced = {due.payload["webhook_id"] for due in pending("webhook.due", correlation_id=delivery_id)}
    made = dict(Message.objects.values_list("change_number", "pk"))
    assert sorted(made) == [1, 2, 3]
    assert announced == set(made.values())  # 3 among them: let go by 2, though 2 was recorded while 3 was
