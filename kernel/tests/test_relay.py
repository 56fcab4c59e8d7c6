"""The relay on the real database and broker: nothing lost, nothing doubled in effect."""

import logging
import threading
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping
from outbox_tests.relaying import broker_behind, effects_per_message, in_thread, publish_many, published_count
from outbox_tests.servers import skip_unless_given
from outbox_tests.tcp_proxy import TcpProxy
from outbox_tests.waiting import wait_until

from outbox.core.subscriptions import queue_name
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.relaying.relay import Relay

pytestmark = pytest.mark.integration


def test_relayed_events_reach_every_subscriber_once(worker, broker):
    for n in range(10):
        ping(n=n)

    assert Relay(broker=broker).drain() == 10

    wait_until(lambda: Effect.objects.count() == 20, what="both subscribers to process all 10 events")
    assert effects_per_message() == {1: 20}
    assert published_count() == 10


def test_the_relay_skips_dramatiqs_enqueue_hooks_only_while_no_middleware_has_one(broker, transactional_db):
    """Calling every middleware's no-op hooks for each copy was 8 % of the relay's CPU: skipped while
    none of them has an enqueue hook, and each copy seen by one that has."""
    import dramatiq
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    from outbox.relaying.publishers import with_enqueue_hooks

    class SeesEnqueues(dramatiq.Middleware):
        def __init__(self):
            self.before, self.after = [], []

        def before_enqueue(self, broker, message, delay):
            self.before.append((message.message_id, message.queue_name))

        def after_enqueue(self, broker, message, delay):
            self.after.append((message.message_id, message.queue_name))

    assert not with_enqueue_hooks(broker)  # this project's middleware: nothing to call
    seer = SeesEnqueues()
    broker.middleware.append(seer)
    try:
        assert with_enqueue_hooks(broker)
        rows = [OutboxMessage.objects.get(stream=f"ping:{ping(n=n).pk}") for n in range(3)]
        assert Relay(broker=broker).drain() == 3
    finally:
        broker.middleware.remove(seer)
    copies = {(str(row.message_id), queue) for row in rows for queue in (queue_name("probe_a"), queue_name("probe_b"))}
    assert set(seer.before) == copies and len(seer.before) == 6
    if isinstance(broker, RabbitmqBroker):  # the Redis pipeline calls before_enqueue only, as before
        assert set(seer.after) == copies


def test_an_event_due_later_waits_until_it_is_due(broker, transactional_db):
    later = ping(n=1, available_at=timezone.now() + timedelta(hours=1))
    ping(n=2)

    assert Relay(broker=broker).drain() == 1
    assert not OutboxMessage.objects.get(stream=f"ping:{later.pk}").published_at


class RelayCrashed(Exception):
    pass


class RelayThatDiesBeforeMarking(Relay):
    def mark_published(self, ids):
        raise RelayCrashed("killed after the broker confirmed, before marking")


def test_a_relay_that_dies_after_sending_is_resent_and_takes_effect_once(worker, broker):
    for n in range(25):
        ping(n=n)

    with pytest.raises(RelayCrashed):
        RelayThatDiesBeforeMarking(broker=broker, lease_seconds=0.5).relay_batch()
    assert published_count() == 0
    wait_until(lambda: Effect.objects.count() == 50, what="the copies sent before the crash to be processed")

    wait_until(
        lambda: Relay(broker=broker).drain() or published_count() == 25,
        what="the lease to expire and a new relay to resend",
    )
    wait_until(
        lambda: InboxMessage.objects.filter(duplicates=1).count() == 50,
        what="every resent copy to be skipped as a duplicate",
    )
    assert effects_per_message() == {1: 50}


@pytest.mark.postgres
@pytest.mark.slow
def test_two_relays_drain_2000_rows_and_every_effect_happens_once(worker, broker):
    publish_many(2000)
    relays = [Relay(broker=broker), Relay(broker=broker)]

    threads = [in_thread(r.drain) for r in relays]
    for thread in threads:
        thread.join(120)

    assert published_count() == 2000
    # Each row was claimed by one relay, once: a relay taking rows the other holds under lease
    # sends them twice (the inboxes would hide it) and counts them twice.
    assert sum(r.relayed for r in relays) == 2000
    assert set(OutboxMessage.objects.values_list("send_attempts", flat=True)) == {1}
    wait_until(lambda: Effect.objects.count() >= 4_000, timeout=120, what="4,000 effects (2,000 x 2 subscribers)")
    assert effects_per_message() == {1: 4_000}


@pytest.mark.postgres
def test_a_row_that_commits_after_later_rows_were_published_is_still_published(broker, transactional_db):
    inserted, release = threading.Event(), threading.Event()

    def slow_transaction():
        with transaction.atomic():
            ping(n=0)
            inserted.set()
            release.wait(30)

    slow = in_thread(slow_transaction)
    inserted.wait(10)
    for n in range(1, 4):
        ping(n=n)
    relay = Relay(broker=broker)
    assert relay.drain() == 3
    release.set()
    slow.join(10)

    assert relay.drain() == 1
    assert published_count() == 4
    late = OutboxMessage.objects.get(payload__n=0)
    assert late.id < OutboxMessage.objects.filter(payload__n=1).get().id


@pytest.mark.postgres
def test_listen_notify_wakes_the_relay_long_before_its_poll(broker, worker, settings):
    settings.OUTBOX_RELAY_POLL_SECONDS = 60
    stop = threading.Event()
    relay = Relay(broker=broker)
    running = in_thread(relay.run, stop=stop)
    try:
        wait_until(relay.idle.is_set, what="the relay to have drained and gone to sleep")
        ping(n=1)
        wait_until(lambda: published_count() == 1, timeout=10, what="NOTIFY to wake the relay (poll is 60 s)")
    finally:
        stop.set()
        running.join(10)
    assert not running.is_alive()


def test_while_the_broker_is_down_requests_commit_and_the_relay_drains_once_it_returns(worker, caplog):
    url = urlsplit(settings.BROKER_URL)
    if url.port is None:  # the embedded broker listens on a socket file, where no proxy stands
        skip_unless_given("rabbitmq")
    proxy = TcpProxy(url.hostname, url.port)
    proxy.up()
    relay = Relay(broker=broker_behind(proxy))
    stop = threading.Event()
    caplog.set_level(logging.WARNING, logger="outbox.relaying.relay")
    running = in_thread(relay.run, stop=stop)
    try:
        ping(n=0)
        wait_until(lambda: published_count() == 1, what="the first event to go through")
        proxy.down()

        for n in range(1, 51):
            ping(n=n)  # what a request does: commits without touching the broker
        assert OutboxMessage.objects.filter(published_at__isnull=True).count() == 50
        wait_until(lambda: "relay paused" in caplog.text, what="the relay to notice the outage")
        wait_until(lambda: relay.failed_rounds >= 2, what="the relay to retry while the broker is down")
        assert not OutboxMessage.objects.filter(send_attempts__gt=1).exists()  # an outage is no row's fault

        proxy.up()
        wait_until(lambda: published_count() == 51, what="the backlog to drain after the broker returns")
        wait_until(lambda: Effect.objects.count() == 102, what="both subscribers to process the backlog")
    finally:
        stop.set()
        running.join(10)
        proxy.down()
    assert effects_per_message() == {1: 102}
    paused = [r for r in caplog.records if "relay paused" in r.getMessage()]
    resumed = [r for r in caplog.records if "relay resumed" in r.getMessage()]
    assert (len(paused), len(resumed)) == (1, 1)


def test_a_failing_subscriber_is_dead_lettered_while_the_other_processes_everything(worker, broker):
    for n in range(20):
        ping(n=n, fail={"probe_b": "always"})

    Relay(broker=broker).drain()

    wait_until(
        lambda: DeadLetter.objects.filter(subscriber="probe_b").count() == 20,
        timeout=60,
        what="probe_b's 20 messages to be dead-lettered",
    )
    assert Effect.objects.filter(subscriber="probe_a").count() == 20
    assert Effect.objects.filter(subscriber="probe_b").count() == 0
    assert set(DeadLetter.objects.values_list("reason", "attempts")) == {
        ("handler_error", settings.OUTBOX_MAX_RETRIES + 1)
    }


def test_an_endless_chain_of_events_is_cut_at_the_hops_bound(worker, broker):
    ping(n=0, fail={"probe_a": "echo"})
    stop = threading.Event()
    running = in_thread(Relay(broker=broker).run, stop=stop)
    try:
        letter = wait_until(lambda: DeadLetter.objects.first(), what="the chain to be dead-lettered")
    finally:
        stop.set()
        running.join(10)

    assert (letter.reason, letter.subscriber, letter.envelope["hops"]) == (
        "loop_detected",
        "probe_b",
        settings.OUTBOX_MAX_HOPS + 1,
    )
    chain = OutboxMessage.objects.filter(correlation_id=letter.correlation_id)
    assert chain.count() == settings.OUTBOX_MAX_HOPS + 2  # the ping, then one echo per hop
