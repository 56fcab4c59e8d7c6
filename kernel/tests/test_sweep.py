"""The redelivery sweep: a message the broker lost is sent again, and given up on after a bound."""

import threading
from datetime import timedelta
from io import StringIO

import dramatiq
import pytest
from django.core.management import call_command
from django.utils import timezone
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping
from outbox_tests.relaying import in_thread, relayed_and_acknowledged
from outbox_tests.waiting import wait_until

from outbox.console.dead_letter_actions import replay_dead_letter
from outbox.core.dead_letters import record_dead_letter
from outbox.core.subscriptions import queue_name
from outbox.handling.dispatch import Outcome as Handled
from outbox.handling.dispatch import dispatch
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.relaying.publishers import Outcome
from outbox.relaying.rabbitmq_publisher import PipelinedPublisher
from outbox.relaying.relay import Relay
from outbox.relaying.sweep import sweep_unacknowledged

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


def test_a_subscriber_that_never_acks_gets_bounded_copies_then_a_letter(broker, transactional_db, no_grace):
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


class ConfirmsNeverCome(PipelinedPublisher):
    """A publisher whose confirms do not arrive until `stop`: the relay's drain never returns."""

    def __init__(self, *args, stop: threading.Event, **kwargs):
        super().__init__(*args, **kwargs)
        self.stop = stop

    def collect(self, *, wait=0.0):
        if self.stop.wait(wait):
            return Outcome(error=TimeoutError("no confirm"))  # as after CONFIRM_TIMEOUT_SECONDS
        return Outcome()


@pytest.mark.postgres
@pytest.mark.rabbitmq  # the pipelined publisher's
def test_the_sweep_runs_while_the_relay_never_returns_from_its_drain(broker, transactional_db, settings):
    settings.OUTBOX_SWEEP_INTERVAL_SECONDS, settings.OUTBOX_SWEEP_GRACE_SECONDS = 0.2, 1
    relayed_and_acknowledged(10, seconds_ago=30)
    ping(n=1)  # kept in flight for ever
    relay, stop = Relay(broker=broker), threading.Event()
    relay.publisher = ConfirmsNeverCome(broker, stop=stop)
    running = in_thread(relay.run, stop=stop)
    try:
        wait_until(
            lambda: (
                OutboxMessage.objects.filter(stream__startswith="load:", acknowledged_at__isnull=False).count() == 10
            ),
            what="the sweep to settle the acknowledged events meanwhile",
        )
    finally:
        stop.set()
        running.join(30)


def test_a_replay_the_broker_lost_is_sent_again_by_the_sweep(broker, transactional_db, no_grace):
    event = OutboxMessage.objects.get(stream=f"ping:{ping(n=1).pk}")
    letter = record_dead_letter(subscriber="probe_b", body=event.envelope(), reason="handler_error")
    dispatch(subscriber="probe_a", body=event.envelope())
    OutboxMessage.objects.filter(pk=event.pk).update(published_at=timezone.now())  # relayed long ago
    replay_dead_letter(letter_id=letter.pk, by="ops")
    assert Relay(broker=broker).drain() == 1  # the replay's copy is sent...
    broker.flush(queue_name("probe_b"))  # ...and lost by the broker

    swept = sweep_unacknowledged()  # a replayed letter is still owed, not an acknowledgement

    assert swept.resent == 1
    assert Relay(broker=broker).drain() == 1
    consumer = broker.consume(queue_name("probe_b"), timeout=100)
    try:
        message = wait_until(lambda: next(consumer), what="the copy sent again, on probe_b's queue")
        consumer.ack(message)
    finally:
        consumer.close()
    assert dispatch(subscriber="probe_b", body=message.args[0]) is Handled.PROCESSED
    letter.refresh_from_db()
    assert letter.status == "processed"


@pytest.mark.postgres
def test_a_sweep_asked_to_stop_stops_between_pages(transactional_db, no_grace):
    relayed_and_acknowledged(10, seconds_ago=30)
    stopped = threading.Event()
    stopped.set()

    assert sweep_unacknowledged(stop=stopped).pages == 0  # a relay stopping does not wait for a catch-up run
    assert sweep_unacknowledged().settled == 10
