"""The relay's pipelined publisher on the real RabbitMQ: a nack and a connection cut mid-batch
leave the unconfirmed rows unsent, and sending them again takes effect once."""

import subprocess
import threading
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from outbox.models import OutboxMessage
from outbox.publishers import Outcome, PipelinedPublisher
from outbox.relay import BrokerUnavailable, Relay
from outbox.subscriptions import queue_name
from tests.outbox.relaying import broker_behind, effects_per_message, in_thread, published_count
from tests.probe.models import Effect
from tests.probe.services import ping
from tests.tcp_proxy import TcpProxy
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def rabbitmq():
    if not urlsplit(settings.BROKER_URL).scheme.startswith("amqp"):
        pytest.skip("the pipelined publisher serves RabbitMQ: needs BROKER_URL=amqp://")


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)


def test_the_relay_sends_through_the_pipelined_publisher_on_rabbitmq(broker):
    assert isinstance(Relay(broker=broker).publisher, PipelinedPublisher)


def test_a_nacked_copy_leaves_its_row_unsent_until_the_broker_takes_it(worker, broker):
    rows = [OutboxMessage.objects.get(stream=f"ping:{ping(n=n).pk}") for n in range(5)]
    full = f"{queue_name('probe_b')}-full"
    # A real nack: probe_b's queue refuses every publish while this policy holds.
    rabbitmqctl(
        "set_policy",
        "--apply-to",
        "queues",
        full,
        f"^{queue_name('probe_b')}$",
        '{"max-length":0,"overflow":"reject-publish"}',
    )
    try:
        with pytest.raises(BrokerUnavailable):
            Relay(broker=broker).relay_batch()
        assert published_count() == 0  # probe_a took its copies; that is not enough
        assert set(OutboxMessage.objects.values_list("claimed_by", flat=True)) == {""}  # released for another try
    finally:
        rabbitmqctl("clear_policy", full)

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


def test_a_cut_while_more_batches_are_in_flight_releases_them_and_the_drain_resumes_exactly_once(worker, broker):
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
