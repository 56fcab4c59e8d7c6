"""The relay's pipelined publisher on the real RabbitMQ: a nack and a connection cut mid-batch
leave the unconfirmed rows unsent, and sending them again takes effect once."""

import subprocess
import threading
import uuid
from urllib.parse import urlsplit

import dramatiq
import pika
import pytest
from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import dq_name, xq_name
from outbox_tests.probe.events import ProbeEchoed
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping
from outbox_tests.relaying import broker_behind, effects_per_message, in_thread, published_count
from outbox_tests.servers import broker_virtual_host
from outbox_tests.tcp_proxy import TcpProxy
from outbox_tests.waiting import wait_until

from outbox.core.brokers import reconnected_if_lost
from outbox.core.publishing import publish
from outbox.core.subscriptions import PACK, is_pack, queue_name
from outbox.models import DeadLetter, OutboxMessage
from outbox.relaying import leases
from outbox.relaying.publishers import Outcome
from outbox.relaying.rabbitmq_publisher import PipelinedPublisher
from outbox.relaying.relay import BrokerUnavailable, Relay

pytestmark = [pytest.mark.integration, pytest.mark.rabbitmq]  # the pipelined publisher serves RabbitMQ


def set_policy(name: str, queue: str, definition: str) -> None:
    """A policy on the one queue named, in the virtual host this run's BROKER_URL names: a policy
    holds in one virtual host, and the test's queues are in BROKER_URL's."""
    rabbitmqctl("set_policy", "-p", broker_virtual_host(), "--apply-to", "queues", name, f"^{queue}$", definition)


def clear_policy(name: str) -> None:
    rabbitmqctl("clear_policy", "-p", broker_virtual_host(), name)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)


def test_the_relay_sends_through_the_pipelined_publisher_on_rabbitmq(broker):
    assert isinstance(Relay(broker=broker).publisher, PipelinedPublisher)


def test_a_nacked_copy_leaves_its_row_unsent_until_the_broker_takes_it(worker, broker):
    rows = [OutboxMessage.objects.get(stream=f"ping:{ping(n=n).pk}") for n in range(5)]
    full = f"{queue_name('probe_b')}-full"
    # A real nack: probe_b's queue refuses every publish while this policy holds.
    set_policy(full, queue_name("probe_b"), '{"max-length":0,"overflow":"reject-publish"}')
    try:
        with pytest.raises(BrokerUnavailable):
            Relay(broker=broker).relay_batch()
        assert published_count() == 0  # probe_a took its copies; that is not enough
        assert set(OutboxMessage.objects.values_list("claimed_by", flat=True)) == {""}  # released for another try
    finally:
        clear_policy(full)

    Relay(broker=broker).drain()

    assert published_count() == len(rows)
    wait_until(lambda: Effect.objects.count() == 2 * len(rows), what="both subscribers to process every row")
    assert effects_per_message() == {1: 10}  # probe_a's first copies made the second ones duplicates


class PublisherCutMidBatch(PipelinedPublisher):
    """Cuts its own TCP connection to RabbitMQ after `cut_after` messages of a batch."""

    def __init__(self, *args, proxy: TcpProxy, cut_after: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.proxy, self.cut_after, self.sent = proxy, cut_after, 0

    def _send(self, key, message):
        super()._send(key, message)
        self.sent += 1
        if self.sent == self.cut_after:
            self.proxy.down()


def a_relay_cut_off(*, rows: int, cut_after: int, window: int, batch_size: int | None = None):
    """`rows` pings to relay, and a relay whose connection to RabbitMQ is cut after `cut_after` copies."""
    url = urlsplit(settings.BROKER_URL)
    proxy = TcpProxy(url.hostname, url.port)
    proxy.up()
    for n in range(rows):
        ping(n=n)
    relay = Relay(broker=broker_behind(proxy), batch_size=batch_size)
    relay.publisher = PublisherCutMidBatch(relay.broker, proxy=proxy, cut_after=cut_after, window=window)
    return relay, proxy


def test_a_connection_cut_mid_batch_marks_only_rows_whose_every_copy_was_confirmed(worker, broker):
    relay, proxy = a_relay_cut_off(rows=100, cut_after=60, window=10)
    try:
        with pytest.raises(BrokerUnavailable):
            relay.relay_batch()
    finally:
        proxy.down()
    marked = set(OutboxMessage.objects.filter(published_at__isnull=False).values_list("message_id", flat=True))
    assert 0 < len(marked) <= 30  # confirmed before the cut: at most the 60 copies sent, 2 a row
    assert not OutboxMessage.objects.filter(published_at__isnull=True).exclude(claimed_by="").exists()
    # What was marked really is at the broker: both copies of each marked row are processed.
    wait_until(
        lambda: set(Effect.objects.filter(message_id__in=marked).values_list("message_id", flat=True)) == marked,
        what="the marked rows' copies to be processed",
    )

    Relay(broker=broker).drain()

    assert published_count() == 100
    wait_until(lambda: Effect.objects.count() == 200, what="every row processed by both subscribers")
    assert effects_per_message() == {1: 200}


def test_a_cut_with_batches_in_flight_releases_them_and_drains_once(worker, broker):
    # Cut in the third batch's copies, with whatever else was claimed meanwhile in flight.
    relay, proxy = a_relay_cut_off(rows=40, cut_after=45, window=100, batch_size=10)
    try:
        with pytest.raises(BrokerUnavailable):
            relay.drain()
    finally:
        proxy.down()

    assert published_count() <= 22  # at most the rows whose both copies were among the 45 sent
    unsent = OutboxMessage.objects.filter(published_at__isnull=True)
    assert set(unsent.values_list("claimed_by", "send_attempts")) == {("", 0)}  # released, uncounted
    Relay(broker=broker).drain()
    assert published_count() == 40
    wait_until(lambda: Effect.objects.count() == 80, what="every row processed by both subscribers")
    assert effects_per_message() == {1: 80}


class ConfirmsHeldBack(PipelinedPublisher):
    """Reads no confirm until `release` is set, as when the consumers' handlers are slow
    (RabbitMQ confirms a copy a consumer took at once only when the consumer acks it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release = threading.Event()

    def collect(self, *, wait=0.0):
        if not self.release.wait(wait):
            return Outcome()
        return super().collect(wait=wait)


def test_a_row_committed_while_earlier_copies_await_their_confirms_is_sent_at_once(worker, broker):
    relay = Relay(broker=broker)
    relay.publisher = ConfirmsHeldBack(broker)
    first = OutboxMessage.objects.get(stream=f"ping:{ping(n=1).pk}")
    draining = in_thread(relay.drain)
    try:
        wait_until(lambda: Effect.objects.filter(message_id=first.message_id).count() == 2, what="the first row")
        second = OutboxMessage.objects.get(stream=f"ping:{ping(n=2).pk}")
        wait_until(
            lambda: Effect.objects.filter(message_id=second.message_id).count() == 2,
            what="the second row, sent while the first one's confirms are still outstanding",
        )
        assert published_count() == 0  # neither is marked before its confirms are read
    finally:
        relay.publisher.release.set()
        draining.join(30)
    assert not draining.is_alive()
    assert published_count() == 2
    assert effects_per_message() == {1: 4}


def copy_to(queue: str, message_id: str) -> dramatiq.Message:
    return dramatiq.Message(queue_name=queue, actor_name="x", args=(), kwargs={}, options={}, message_id=message_id)


def test_a_copy_the_broker_returns_never_counts_as_delivered_whatever_its_siblings_acks():
    """2,000 rows, each one copy to a live queue and one to a deleted queue (returned as unroutable):
    every copy of a row shares the event's message id, and a sibling's ack must not hide a return."""
    live, dead = f"{settings.OUTBOX_QUEUE_PREFIX}returns-live", f"{settings.OUTBOX_QUEUE_PREFIX}returns-dead"
    broker = RabbitmqBroker(url=settings.BROKER_URL, confirm_delivery=True, middleware=[])  # no worker reads it
    for queue in (live, dead):
        broker.declare_queue(queue, ensure=True)
    broker.channel.queue_delete(dead)  # the broker object still believes it declared
    # The live queue drops what it is given: its copies are acked at once, often before the
    # return of the sibling copy sent after them arrives (the interleaving that hid returns).
    set_policy(live, live, '{"max-length":0}')
    publisher = PipelinedPublisher(broker)
    batch = []
    for key in range(2000):
        message_id = str(uuid.uuid4())
        to = [live, dead] if key % 2 else [dead, live]  # both orders of the live and the returned copy
        batch.append((key, [copy_to(queue, message_id) for queue in to]))
    try:
        outcome = publisher.publish(batch)
    finally:
        publisher.close()
        clear_policy(live)
        for queue in (live, dq_name(live), xq_name(live), dq_name(dead), xq_name(dead)):
            broker.channel.queue_delete(queue)
        broker.close()

    assert outcome.error is None
    assert outcome.confirmed == set()  # no row had every copy delivered
    assert outcome.refused == set(range(2000))
    assert {frozenset(queues) for queues in outcome.acked.values()} == {frozenset({live})}  # what did arrive


class AcksReadLate(PipelinedPublisher):
    """Takes each ack the broker sends into account one `collect` after the one that read it, as when
    the acks come in a later read than the returns sent before them (a busy broker: its queues confirm
    a copy after its channel has returned the unroutable one; seen under load, never forced before)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.late: list = []

    def _on_confirm(self, frame) -> None:
        self.late.append(frame)

    def collect(self, *, wait=0.0):
        outcome = super().collect(wait=wait)
        late, self.late = self.late, []
        for frame in late:
            super()._on_confirm(frame)
        return outcome


def test_a_refused_row_is_handed_back_once_every_copy_is_confirmed():
    """Each row's first copy goes to a deleted queue and comes back; its second goes to a live queue,
    whose ack is read after the return. Handed back at the return, a row named no queue as reached
    (`frozenset()` in `acked`, as test_a_copy_the_broker_returns_never_counts_as_delivered_... once
    saw under load) and the late ack was dropped: the relay would send the live copy again."""
    live, dead = f"{settings.OUTBOX_QUEUE_PREFIX}late-acks-live", f"{settings.OUTBOX_QUEUE_PREFIX}late-acks-dead"
    broker = RabbitmqBroker(url=settings.BROKER_URL, confirm_delivery=True, middleware=[])  # no worker reads it
    for queue in (live, dead):
        broker.declare_queue(queue, ensure=True)
    broker.channel.queue_delete(dead)  # the broker object still believes it declared
    publisher = AcksReadLate(broker)
    ids = [str(uuid.uuid4()) for _ in range(20)]
    try:
        outcome = publisher.publish([(key, [copy_to(queue, ids[key]) for queue in (dead, live)]) for key in range(20)])
    finally:
        publisher.close()
        for queue in (live, dq_name(live), xq_name(live), dq_name(dead), xq_name(dead)):
            broker.channel.queue_delete(queue)
        broker.close()

    assert outcome.error is None
    assert outcome.refused == set(range(20))
    assert outcome.acked == {key: {live} for key in range(20)}
    assert outcome.unroutable == {key: {dead} for key in range(20)}


class PublisherWithAPoisonRow(PipelinedPublisher):
    """Sends the copies of one message with a property RabbitMQ answers by closing the channel,
    as it does for a message over its max_message_size: no nack, no return, just a closed channel."""

    def __init__(self, *args, poison: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.poison = poison

    def _properties(self, message):
        properties = super()._properties(message)
        if message.message_id == self.poison:
            properties.expiration = "never"  # PRECONDITION_FAILED - invalid expiration
        return properties


def test_a_row_that_makes_the_broker_close_the_channel_is_found_counted_and_set_aside(worker, broker, settings):
    settings.OUTBOX_RELAY_MAX_SEND_ATTEMPTS = 2
    for n in range(20):
        ping(n=n)
    poison = OutboxMessage.objects.order_by("id")[7]
    relay = Relay(broker=broker)
    relay.publisher = PublisherWithAPoisonRow(broker, poison=str(poison.message_id))

    relay.drain()  # returns: the rows lost with the closed channel are sent again in halves

    assert published_count() == 19
    poison.refresh_from_db()
    assert (poison.published_at, poison.send_attempts) == (None, 1)  # counted, and kept under its lease
    assert poison.claimed_by != ""
    wait_until(lambda: Effect.objects.count() == 38, what="the 19 other rows processed by both subscribers")

    OutboxMessage.objects.filter(pk=poison.pk).update(claimed_until=timezone.now())  # its lease runs out
    assert relay.drain() == 0  # sent alone once more: the second attempt sets it aside
    assert DeadLetter.objects.count() == 2
    assert set(DeadLetter.objects.values_list("reason", "message_id")) == {("unsendable", poison.message_id)}
    assert effects_per_message() == {1: 38}


def test_a_queue_that_is_down_is_an_outage_its_rows_wait_uncounted_and_flow_when_it_is_back(
    broker, transactional_db, settings, caplog
):
    """Probe_b's queue is gone (as when its cluster node is down): every copy to it
    comes back unroutable. That is no poison row: no attempt counts, no `unsendable` letter, one
    warning for the queue, and once the queue is back every row goes through."""
    settings.OUTBOX_RELAY_MAX_SEND_ATTEMPTS = 2
    rows = [OutboxMessage.objects.get(stream=f"ping:{ping(n=n).pk}") for n in range(5)]
    down = queue_name("probe_b")
    broker.declare_queue(down, ensure=True)
    broker.channel.queue_delete(down)  # the broker object still believes it declared it
    relay = Relay(broker=broker)
    relay.publisher.declare_again = lambda queue: False  # its node is down: declaring it is refused too

    for _ in range(4):  # twice the attempts that would set a poison row aside
        assert relay.relay_batch() == 0
        OutboxMessage.objects.update(claimed_until=timezone.now())  # its short wait is over

    assert published_count() == 0 and not DeadLetter.objects.exists()
    assert set(OutboxMessage.objects.values_list("send_attempts", flat=True)) == {0}
    outage_lines = [r for r in caplog.records if "is unavailable" in r.getMessage()]
    assert [r.getMessage() for r in outage_lines] == [
        f"queue {down} is unavailable (the broker returns its copies): its rows wait"
    ]

    broker._declare_queue(down)  # the queue is back (its node restarted, or a worker declared it)
    assert relay.relay_batch() == len(rows)

    assert published_count() == len(rows)
    assert copies_in(down, broker) == len(rows)
    assert any("takes copies again" in r.getMessage() for r in caplog.records)
    assert not relay.queues_down


@pytest.fixture
def delete_queue(broker):
    """Delete a subscriber's queue under the relay; declared again after the test, since Dramatiq's
    broker object, which the tests that follow in this process share, still believes it declared."""
    deleted = []

    def delete(subscriber: str) -> str:
        deleted.append(queue_name(subscriber))
        broker.channel.queue_delete(deleted[-1])
        return deleted[-1]

    yield delete
    for name in deleted:
        reconnected_if_lost(broker)._declare_queue(name)


def copies_in(queue: str, broker) -> int:
    """The copies waiting in `queue`: its messages' envelopes, a pack counting for each it carries.
    Read unacknowledged on a connection of their own, closed at the end: they stay in the queue."""
    with pika.BlockingConnection(broker.parameters) as c:
        channel, copies = c.channel(), 0
        while (got := channel.basic_get(queue, auto_ack=False))[0] is not None:
            message = dramatiq.Message.decode(got[2])
            copies += len(message.kwargs[PACK]) if is_pack(message.args, message.kwargs) else 1
        return copies


def test_a_queue_deleted_under_a_relay_is_declared_again(broker, transactional_db, delete_queue):
    """The relay declares each queue once; one deleted under it returned every copy for
    ever, and each try sent the waiting rows again to every subscriber they had reached."""
    healthy, down = queue_name("probe_a"), queue_name("probe_b")
    relay = Relay(broker=broker)
    ping(n=0)
    assert relay.drain() == 1  # every queue declared, by the relay's publisher
    delete_queue("probe_b")
    for n in range(1, 6):
        ping(n=n)

    assert relay.relay_batch() == 0  # probe_b's copies come back; probe_a's are taken
    OutboxMessage.objects.update(claimed_until=timezone.now())  # their short wait is over
    assert relay.relay_batch() == 5  # the queue declared again: probe_b's copies only

    assert (copies_in(healthy, broker), copies_in(down, broker)) == (6, 5)
    assert not relay.queues_down and relay.reached == {}


def test_a_queue_down_past_its_bound_has_its_waiting_copies_set_aside_and_nothing_else(
    broker, transactional_db, settings, delete_queue
):
    settings.OUTBOX_RELAY_QUEUE_WAIT_SECONDS = 0.5
    healthy = queue_name("probe_a")
    relay = Relay(broker=broker)
    ping(n=0)
    assert relay.drain() == 1
    delete_queue("probe_b")
    relay.publisher.declare_again = lambda queue: False  # its node is down: declaring it is refused too
    rows = [OutboxMessage.objects.get(stream=f"ping:{ping(n=n).pk}") for n in range(1, 4)]

    def set_aside() -> bool:
        OutboxMessage.objects.update(claimed_until=timezone.now())  # each short wait over at once
        relay.relay_batch()
        return not OutboxMessage.objects.filter(published_at__isnull=True).exists()

    wait_until(set_aside, timeout=30, what="the waiting rows to be set aside once the queue is down past its bound")
    letters = DeadLetter.objects.order_by("message_id")
    assert [(d.subscriber, d.reason, d.message_id) for d in letters] == sorted(
        [("probe_b", "unsendable", row.message_id) for row in rows], key=lambda letter: letter[2]
    )
    assert all("unavailable for over 0.5 s (OUTBOX_RELAY_QUEUE_WAIT_SECONDS)" in d.error for d in letters)
    assert copies_in(healthy, broker) == 4  # one copy of each row, however many tries


def test_rows_the_broker_confirmed_are_marked_even_when_holding_back_a_returned_one_fails(
    broker, transactional_db, monkeypatch, delete_queue
):
    """The rows waiting for a down queue were held back before the confirmed rows were
    marked; the database failing there (a failover) left the confirmed rows to be sent again."""
    relay = Relay(broker=broker)
    ping(n=0)
    assert relay.drain() == 1
    delete_queue("probe_a")
    relay.publisher.declare_again = lambda queue: False  # its node is down: declaring it is refused too
    ping(n=1)  # to probe_a, whose copy comes back, and probe_b
    with transaction.atomic():
        publish(ProbeEchoed(n=2), stream="echo:held-back")  # to probe_b only: confirmed
    echo = OutboxMessage.objects.get(type="probe.echoed")

    def postpone_failing_over(rows, **kwargs):
        raise DatabaseError("server closed the connection unexpectedly")

    monkeypatch.setattr(leases, "postpone", postpone_failing_over)
    with pytest.raises(DatabaseError):
        relay.relay_batch()
    monkeypatch.undo()

    relay.unsettled.settle()  # what the next round writes back first
    echo.refresh_from_db()
    assert echo.published_at is not None, "confirmed by the broker, and to be sent again"
