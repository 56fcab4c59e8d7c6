"""The redelivery sweep: a message the broker lost is sent again, and given up on after a bound."""

from datetime import timedelta
from io import StringIO

import dramatiq
import pytest
from django.core.management import call_command
from django.utils import timezone

from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.relay import Relay
from outbox.subscriptions import queue_name
from outbox.sweep import sweep_unacknowledged
from tests.probe.models import Effect
from tests.probe.services import ping
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def no_grace(settings):
    settings.OUTBOX_SWEEP_GRACE_SECONDS = 0
    settings.OUTBOX_SWEEP_MAX_RESENDS = 2


def test_a_message_purged_from_its_queue_is_sent_again_and_takes_effect_once(broker, transactional_db, no_grace):
    event = OutboxMessage.objects.get(stream=f"ping:{ping(n=1).pk}")
    assert Relay(broker=broker).drain() == 1
    broker.flush(queue_name("probe_b"))  # the broker lost probe_b's copy
    worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    try:
        wait_until(lambda: Effect.objects.filter(subscriber="probe_a").exists(), what="probe_a's copy")
        out = StringIO()
        call_command("sweep_unacknowledged", stdout=out)
        assert "1 copies sent again" in out.getvalue()
        Relay(broker=broker).drain()
        wait_until(lambda: Effect.objects.filter(subscriber="probe_b").exists(), what="the copy sent again")
    finally:
        worker.stop(timeout=10_000)

    assert Effect.objects.filter(subscriber="probe_b").count() == 1
    swept = sweep_unacknowledged()
    assert (swept.settled, swept.resent) == (1, 0)
    event.refresh_from_db()
    assert event.acknowledged_at is not None
    assert sweep_unacknowledged().looked_at == 0  # settled rows are never read again


def test_a_subscriber_that_never_acknowledges_gets_a_bounded_number_of_copies_then_a_dead_letter(
    broker, transactional_db, no_grace
):
    ping(n=1)
    relay = Relay(broker=broker)
    relay.drain()  # no worker runs: nobody ever acknowledges

    resent = []
    for _ in range(4):
        resent.append(sweep_unacknowledged().resent)
        relay.drain()

    assert resent == [2, 2, 0, 0]  # two subscribers, OUTBOX_SWEEP_MAX_RESENDS copies each
    letters = DeadLetter.objects.order_by("subscriber")
    assert [(d.subscriber, d.reason, d.attempts) for d in letters] == [
        ("probe_a", "never_acknowledged", 3),
        ("probe_b", "never_acknowledged", 3),
    ]
    assert OutboxMessage.objects.get(target_subscriber="").acknowledged_at  # a dead letter settles it too


def test_the_sweep_waits_out_the_grace_period_and_leaves_events_beyond_its_horizon(broker, transactional_db, settings):
    settings.OUTBOX_SWEEP_GRACE_SECONDS, settings.OUTBOX_SWEEP_HORIZON_SECONDS = 600, 3600
    ping(n=1)
    ping(n=2)
    Relay(broker=broker).drain()
    old = OutboxMessage.objects.order_by("id").first()
    OutboxMessage.objects.filter(pk=old.pk).update(published_at=timezone.now() - timedelta(hours=2))

    swept = sweep_unacknowledged()

    assert (swept.looked_at, swept.resent) == (0, 0)  # one too recent, one too old
    assert not InboxMessage.objects.exists()
