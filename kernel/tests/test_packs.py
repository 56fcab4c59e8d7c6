"""Packs: the copies a relay claimed together for one queue travel in one broker message, and each
envelope in it is still handled, retried and dead-lettered on its own (outbox.handling.packs)."""

import threading
import uuid
from datetime import timedelta

import dramatiq
import pika
import pytest
from django.conf import settings
from django.db.models import Sum
from django.utils import timezone
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import dq_name, xq_name
from dramatiq.middleware import MiddlewareError, TimeLimit
from dramatiq.middleware.time_limit import TimeLimitExceeded
from outbox_tests.probe import handlers as probe
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import send
from outbox_tests.relaying import effects_per_message, envelopes, taken_off
from outbox_tests.waiting import wait_until

from outbox.core.brokers import broker_urls
from outbox.core.dead_letters import record_dead_letter
from outbox.core.subscriptions import PACK, actor_name, is_pack, message_to, pack_of, queue_name, subscribers
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.relaying.broker_letters import collect_broker_dead_letters
from outbox.relaying.rabbitmq_publisher import PipelinedPublisher
from outbox.relaying.relay import Relay
from outbox.relaying.sweep import sweep_unacknowledged

pytestmark = pytest.mark.integration


def time_limit_running(broker) -> TimeLimit:
    time_limit = next(m for m in broker.middleware if isinstance(m, TimeLimit))
    # Deadlines looked at every 50 ms rather than every second, so one fires inside the envelope it
    # falls in, not after it (TimeLimit's `interval`).
    time_limit.manager.interval = 0.05
    if not time_limit.manager.is_alive():
        time_limit.after_process_boot(broker)  # what `rundramatiq` does at boot; an in-process Worker does not
    return time_limit


class Refused(MiddlewareError):
    """What the test's broker answers an enqueue it refuses (a MiddlewareError: Dramatiq lets it through)."""


class Enqueues(dramatiq.Middleware):
    """Test-only middleware on the real broker: keeps every message enqueued, with its delay, and
    hands each to `meddle` first, which may refuse it or hold it up (fault injection)."""

    def __init__(self, meddle):
        self.seen: list[tuple[dramatiq.Message, int | None]] = []
        self.meddle = meddle

    def before_enqueue(self, broker, message, delay):
        self.seen.append((message, delay))
        self.meddle(message)

    def alone(self, message_id: str) -> list[tuple[dramatiq.Message, int | None]]:
        """The enqueues of the message carrying envelope `message_id` alone: first attempts and retries
        (a retry twice: delayed, then back from the delay queue with no delay)."""
        return [(m, delay) for m, delay in self.seen if m.message_id == message_id and not is_pack(m.args, m.kwargs)]


@pytest.fixture
def enqueues(broker):
    """Watch (and meddle with) what is enqueued on the run's broker, for this test only."""
    added = []

    def watch(meddle=lambda message: None) -> Enqueues:
        added.append(Enqueues(meddle))
        broker.add_middleware(added[-1])
        return added[-1]

    yield watch
    for middleware in added:
        broker.middleware.remove(middleware)


@pytest.mark.rabbitmq
def test_copies_for_one_queue_travel_in_packs_of_at_most_the_pack_size(broker, transactional_db, settings):
    settings.OUTBOX_RELAY_PACK_SIZE = 4
    sent = envelopes(6)

    assert Relay(broker=broker).drain() == 6

    ids = [envelope["message_id"] for envelope in sent]
    for subscriber in ("probe_a", "probe_b"):
        messages = taken_off(broker, queue_name(subscriber))
        assert [len(message.kwargs[PACK]) for message in messages] == [4, 2]
        assert [envelope["message_id"] for m in messages for envelope in m.kwargs[PACK]] == ids  # in row order
        assert not set(ids) & {message.message_id for message in messages}  # a pack has an id of its own


@pytest.mark.rabbitmq
def test_a_copy_for_a_handler_with_outside_effects_travels_alone_between_the_packs(broker, transactional_db, settings):
    """A slow call out (a webhook's POST) in a pack would hold up every envelope after it."""
    settings.OUTBOX_RELAY_PACK_SIZE = 4
    envelopes(2)
    send(n=7)  # probe_b's handler of probe.sent has outside effects
    send(n=8, carelessly=True)  # its handler of probe.sent_carelessly does not say so
    envelopes(2)

    assert Relay(broker=broker).drain() == 6

    messages = taken_off(broker, queue_name("probe_b"))
    shapes = [
        message.args[0]["type"] if message.args else [e["type"] for e in message.kwargs[PACK]] for message in messages
    ]
    assert shapes == [
        ["probe.pinged", "probe.pinged"],
        "probe.sent",
        ["probe.sent_carelessly", "probe.pinged", "probe.pinged"],
    ]


@pytest.mark.rabbitmq
def test_with_a_pack_size_of_one_every_copy_travels_alone_as_before(broker, transactional_db, settings):
    settings.OUTBOX_RELAY_PACK_SIZE = 1
    sent = envelopes(3)

    assert Relay(broker=broker).drain() == 3

    messages = taken_off(broker, queue_name("probe_a"))
    assert [message.args for message in messages] == [(envelope,) for envelope in sent]


def test_each_envelope_of_a_pack_takes_effect_once_even_when_the_pack_comes_twice(worker, broker):
    """A worker that dies before acknowledging a pack gets all of it again: the inbox skips what was done."""
    pack = pack_of([message_to("probe_a", envelope) for envelope in envelopes(3)])
    broker.enqueue(pack)
    broker.enqueue(pack)

    wait_until(
        lambda: InboxMessage.objects.filter(subscriber="probe_a").aggregate(n=Sum("duplicates"))["n"] == 3,
        what="the second copy of the pack to be skipped",
    )
    assert effects_per_message() == {1: 3}


def test_an_envelope_that_fails_in_a_pack_is_retried_alone_and_its_neighbours_are_not(worker, broker):
    failing = envelopes(1, fail={"probe_a": "once"})[0]
    pack = pack_of([message_to("probe_a", envelope) for envelope in [*envelopes(2), failing]])
    broker.enqueue(pack)

    wait_until(lambda: Effect.objects.count() == 3, what="all three envelopes to take effect")
    assert Effect.objects.filter(message_id=failing["message_id"]).exists()  # after its retry
    # Had the whole pack been retried, the two that succeeded the first time would be duplicates.
    assert InboxMessage.objects.filter(subscriber="probe_a").aggregate(n=Sum("duplicates"))["n"] == 0


def test_an_envelope_that_keeps_failing_in_a_pack_is_dead_lettered_alone(worker, broker):
    failing = envelopes(1, fail={"probe_a": "always"})[0]
    broker.enqueue(pack_of([message_to("probe_a", envelope) for envelope in [failing, *envelopes(2)]]))

    letter = wait_until(lambda: DeadLetter.objects.first(), timeout=60, what="the failing envelope's dead letter")
    assert (letter.message_id, letter.reason) == (uuid.UUID(failing["message_id"]), "handler_error")
    assert letter.attempts == settings.OUTBOX_MAX_RETRIES + 1  # its own retries, counted as if it had come alone
    assert Effect.objects.count() == 2 and DeadLetter.objects.count() == 1


def test_the_envelopes_of_a_pack_are_as_old_as_the_pack_not_as_the_moment_they_are_handled(worker, broker, settings):
    """Each envelope is timed from when the relay sent its pack: one past OUTBOX_MESSAGE_TTL_SECONDS
    then is expired, as it would have been alone."""
    settings.OUTBOX_MESSAGE_TTL_SECONDS = 60
    pack = pack_of([message_to("probe_a", envelope) for envelope in envelopes(2)])
    broker.enqueue(pack.copy(message_timestamp=pack.message_timestamp - 120_000))  # relayed two minutes ago

    letters = wait_until(lambda: DeadLetter.objects.count() == 2 and list(DeadLetter.objects.all()), what="letters")
    assert {letter.reason for letter in letters} == {"expired"}
    assert not Effect.objects.exists()


def test_what_is_not_an_envelope_in_a_pack_is_a_dead_letter_of_its_own(worker, broker):
    good = envelopes(2)
    pack = pack_of([message_to("probe_a", envelope) for envelope in good])
    broker.enqueue(pack.copy(kwargs={PACK: [good[0], "not an envelope", good[1]]}))

    letter = wait_until(lambda: DeadLetter.objects.first(), what="a dead letter")
    assert (letter.reason, letter.envelope) == ("invalid_envelope", "not an envelope")
    wait_until(lambda: Effect.objects.count() == 2, what="the two envelopes around it to take effect")


@pytest.mark.rabbitmq
def test_a_pack_dramatiq_set_aside_becomes_a_dead_letter_for_each_envelope_it_carried(broker, transactional_db):
    sent = envelopes(2)
    queue = queue_name("probe_a")
    broker.declare_queue(queue, ensure=True)  # with its .XQ
    pack = pack_of([message_to("probe_a", envelope) for envelope in sent])
    with pika.BlockingConnection(pika.URLParameters(broker_urls(settings.BROKER_URL)[0])) as connection:
        connection.channel().basic_publish("", xq_name(queue), pack.encode(), pika.BasicProperties(delivery_mode=2))

    assert collect_broker_dead_letters(broker, subscribers()) == 1

    letters = DeadLetter.objects.order_by("id")
    assert [(letter.reason, letter.envelope) for letter in letters] == [("failed_by_dramatiq", e) for e in sent]


@pytest.mark.rabbitmq
def test_a_returned_pack_leaves_every_row_it_carried_unsent_and_an_acked_one_sends_them_all():
    """Bookkeeping per copy, a pack being one copy of each of its rows: one row's copies to a live
    queue (acked) and to a deleted one (returned), packed four to a message each way."""
    live, dead = f"{settings.OUTBOX_QUEUE_PREFIX}packs-live", f"{settings.OUTBOX_QUEUE_PREFIX}packs-dead"
    broker = RabbitmqBroker(url=settings.BROKER_URL, confirm_delivery=True, middleware=[])  # no worker reads it
    for queue in (live, dead):
        broker.declare_queue(queue, ensure=True)
    broker.channel.queue_delete(dead)  # the broker object still believes it declared
    publisher = PipelinedPublisher(broker, pack_size=4)
    copies = {}
    for key in range(10):
        envelope = {"message_id": str(uuid.uuid4())}
        to = [live, dead] if key < 6 else [live]
        copies[key] = [
            dramatiq.Message(queue_name=q, actor_name="x", args=(envelope,), kwargs={}, options={}) for q in to
        ]
    try:
        outcome = publisher.publish(list(copies.items()))
        in_the_live_queue = [len(message.kwargs[PACK]) for message in taken_off(broker, live)]
    finally:
        publisher.close()
        for queue in (live, dq_name(live), xq_name(live), dq_name(dead), xq_name(dead)):
            broker.channel.queue_delete(queue)
        broker.close()

    assert in_the_live_queue == [4, 4, 2]
    assert outcome.error is None
    assert outcome.refused == set(range(6))  # each had a copy in a returned pack
    assert outcome.confirmed == set(range(6, 10))  # each had its only copy in acked packs
    assert outcome.unroutable == {key: {dead} for key in range(6)}
    assert outcome.acked == {key: {live} for key in range(6)}


def test_a_worker_counts_each_envelope_of_a_pack_as_handled():
    from outbox.relaying.heartbeats import WorkerHeartbeat

    heartbeat = WorkerHeartbeat()
    alone = message_to("probe_a", {"message_id": str(uuid.uuid4())})
    heartbeat.after_process_message(None, alone)
    heartbeat.after_process_message(None, pack_of([alone, alone, alone]))

    assert heartbeat.handled == 4


def test_a_pack_that_comes_again_is_counted_by_the_heartbeat_once_as_its_envelopes_alone(worker, broker):
    """Unpacked, it handles none of its envelopes itself: each comes again alone and is counted then."""
    from outbox.relaying.heartbeats import WorkerHeartbeat

    heartbeat = next(m for m in broker.middleware if isinstance(m, WorkerHeartbeat))
    before = heartbeat.handled
    pack = pack_of([message_to("probe_a", envelope) for envelope in envelopes(3)])
    pack.options["retries"] = 1  # as Dramatiq's Retries enqueues it again

    broker.enqueue(pack)

    wait_until(lambda: Effect.objects.count() == 3, what="the three envelopes to take effect, alone")
    worker.join()  # every message it took has been through its middleware
    assert heartbeat.handled - before == 3


def test_a_redelivered_pack_counts_none_of_its_envelopes():
    """RabbitMQ's redelivery of a pack whose worker died: unpacked, as a retried one."""
    from dramatiq.brokers.rabbitmq import _RabbitmqMessage

    from outbox.relaying.heartbeats import WorkerHeartbeat

    heartbeat = WorkerHeartbeat()
    alone = message_to("probe_a", {"message_id": str(uuid.uuid4())})
    heartbeat.after_process_message(None, _RabbitmqMessage(True, 1, pack_of([alone, alone, alone])))

    assert heartbeat.handled == 0


@pytest.mark.rabbitmq
def test_a_pack_a_worker_of_an_earlier_version_set_aside_whole_is_sent_again_by_the_sweep(
    broker, transactional_db, settings
):
    """A rolling deploy: a relay of this version sends packs to a worker of an earlier one, which
    knows no packs and sets each aside whole, as one `invalid_envelope` letter naming no message.
    No envelope has an inbox row or a letter of its own, so the sweep finds every copy owed and
    has it sent again; a worker of this version then handles each once."""
    settings.OUTBOX_SWEEP_GRACE_SECONDS = 0
    envelopes(3)
    assert Relay(broker=broker).drain() == 3
    for subscriber in ("probe_a", "probe_b"):
        (pack,) = taken_off(broker, queue_name(subscriber))  # what the earlier worker took and set aside
        record_dead_letter(
            subscriber=subscriber,
            body={"args": list(pack.args), "kwargs": pack.kwargs},
            reason="invalid_envelope",
            error=ValueError("a worker of an earlier version"),
        )

    assert sweep_unacknowledged().resent == 6
    assert Relay(broker=broker).drain() == 6  # a row for each copy sent again
    worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    try:
        wait_until(lambda: Effect.objects.count() == 6, what="every copy sent again to take effect")
    finally:
        worker.stop(timeout=10_000)
    assert effects_per_message() == {1: 6}


def test_each_envelope_of_a_pack_has_the_time_limit_to_itself(worker, broker, caplog):
    """Dramatiq arms one deadline a message: an envelope of 5 s that starts 1.5 s into a pack whose
    limit is 6 s would have been interrupted at 6 s, though it did nothing wrong."""
    time_limit_running(broker)
    sent = [*envelopes(15, fail={"probe_a": "slow"}), *envelopes(1, fail={"probe_a": "stuck"})]  # 0.1 s; 5 s
    pack = pack_of([message_to("probe_a", envelope) for envelope in sent])
    pack.options["time_limit"] = 6000  # ms, for the pack as Dramatiq sees it

    broker.enqueue(pack)

    wait_until(lambda: Effect.objects.count() == 16, timeout=60, what="all sixteen envelopes to take effect")
    assert not [r for r in caplog.records if "Time limit exceeded" in r.getMessage()]
    assert not DeadLetter.objects.exists()


def test_a_pack_hands_what_is_left_on_alone_once_it_has_used_one_time_limit(worker, broker, enqueues):
    """RabbitMQ closes the channel of a delivery left unacknowledged for its consumer_timeout (30 minutes
    by default), and every pack prefetched on it comes again: twenty envelopes with ten minutes each
    would have had over three hours. Once a pack has used one limit, the rest go on alone, as first
    attempts as old as the pack, each counted once by the heartbeat, in the pack or alone."""
    from outbox.relaying.heartbeats import WorkerHeartbeat

    time_limit_running(broker)
    heartbeat = next(m for m in broker.middleware if isinstance(m, WorkerHeartbeat))
    before = heartbeat.handled
    watched = enqueues()
    sent = envelopes(10, fail={"probe_a": "slow"})  # 0.1 s each
    pack = pack_of([message_to("probe_a", envelope) for envelope in sent])
    pack.options["time_limit"] = 300  # ms

    broker.enqueue(pack)

    wait_until(lambda: Effect.objects.count() == 10, timeout=60, what="all ten envelopes to take effect")
    worker.join()
    handed_on = [m for m, _ in watched.seen if not is_pack(m.args, m.kwargs)]
    assert 0 < len(handed_on) < len(sent)
    assert [m.message_id for m in handed_on] == [e["message_id"] for e in sent[-len(handed_on) :]]  # the rest
    assert {(m.options.get("retries", 0), m.message_timestamp) for m in handed_on} == {(0, pack.message_timestamp)}
    assert effects_per_message() == {1: 10}
    assert InboxMessage.objects.filter(subscriber="probe_a").aggregate(n=Sum("duplicates"))["n"] == 0
    assert heartbeat.handled - before == 10


@pytest.mark.rabbitmq
@pytest.mark.parametrize("came_before", ["retried by Dramatiq", "redelivered by RabbitMQ"])
def test_a_pack_that_comes_again_is_unpacked_each_envelope_enqueued_alone(broker, transactional_db, came_before):
    """Its worker died half-way (an envelope that kills its worker would otherwise take the pack down
    with it every time), or something escaped it: each envelope goes back alone, a first attempt."""
    from dramatiq.brokers.rabbitmq import _RabbitmqMessage
    from dramatiq.middleware import CurrentMessage

    from outbox.handling.packs import dispatch_pack

    sent = envelopes(3)
    pack = pack_of([message_to("probe_a", envelope) for envelope in sent])
    if came_before == "retried by Dramatiq":
        pack.options["retries"] = 1
    else:
        pack = _RabbitmqMessage(True, 1, pack)  # what Dramatiq's consumer hands a worker for a redelivery
    broker.declare_queue(queue_name("probe_a"), ensure=True)
    token = CurrentMessage._MESSAGE.set(pack)
    try:
        dispatch_pack(subscriber="probe_a", bodies=pack.kwargs[PACK], broker=broker)
    finally:
        CurrentMessage._MESSAGE.reset(token)

    alone = taken_off(broker, queue_name("probe_a"))
    assert [message.args for message in alone] == [(envelope,) for envelope in sent]
    assert {message.options.get("retries", 0) for message in alone} == {0}
    assert {message.message_timestamp for message in alone} == {pack.message_timestamp}  # as old as the pack
    assert not InboxMessage.objects.exists()  # none handled here: each will be, alone


def test_a_retry_the_broker_refuses_to_enqueue_costs_the_other_envelopes_nothing(broker, transactional_db):
    """The retry of a failing envelope cannot be enqueued (its broker is gone): the envelopes after it
    are still handled, and the pack fails afterwards, to come again and be unpacked."""
    from dramatiq.middleware import Retries

    from outbox.handling.actors import declare_actors
    from outbox.handling.packs import dispatch_pack

    gone = RabbitmqBroker(url="amqp://guest:guest@127.0.0.1:1/%2F", middleware=[Retries()])  # nothing listens there
    declare_actors(gone)
    failing = envelopes(1, fail={"probe_a": "always"})[0]
    after_it = envelopes(2)

    with pytest.raises(dramatiq.errors.BrokerConnectionError):
        dispatch_pack(subscriber="probe_a", bodies=[failing, *after_it], broker=gone)

    assert sorted(str(m) for m in InboxMessage.objects.values_list("message_id", flat=True)) == sorted(
        e["message_id"] for e in after_it
    )


@pytest.mark.parametrize("the_packs_retry", ["taken", "refused too"])
def test_an_envelope_whose_retry_is_refused_is_handled_by_the_sweep(
    worker, broker, enqueues, settings, the_packs_retry
):
    """The broker refuses a failing envelope's retry: the pack raises once the others are handled, and
    Dramatiq's Retries enqueues it again, unpacked then. Should the broker refuse that too, Dramatiq
    logs it and acknowledges the pack: the envelope is owed, and the redelivery sweep sends it again."""
    failing = envelopes(1, fail={"probe_a": "once"})[0]
    sent = [*envelopes(1), failing, *envelopes(1)]
    pack = pack_of([message_to("probe_a", envelope) for envelope in sent])
    refusing = {failing["message_id"]} | ({pack.message_id} if the_packs_retry == "refused too" else set())
    refused = set()

    def refuse_the_first_retry(message):
        if message.message_id in refusing - refused and "eta" in message.options:  # a retry, delayed
            refused.add(message.message_id)
            raise Refused(f"no room for {message.message_id}")

    enqueues(refuse_the_first_retry)

    broker.enqueue(pack)

    if the_packs_retry == "refused too":
        wait_until(lambda: Effect.objects.count() == 2, what="the two envelopes around the failing one")
        worker.join()  # nothing more comes: the pack was acknowledged
        assert refused == refusing
        assert not InboxMessage.objects.filter(message_id=failing["message_id"]).exists()
        assert not DeadLetter.objects.exists()
        settings.OUTBOX_SWEEP_GRACE_SECONDS = 0
        OutboxMessage.objects.update(published_at=timezone.now() - timedelta(seconds=1))  # as if relayed
        sweep_unacknowledged()
        resent = OutboxMessage.objects.filter(target_subscriber="probe_a").values_list("message_id", flat=True)
        assert [str(message_id) for message_id in resent] == [failing["message_id"]]
        Relay(broker=broker).drain()  # the copies the sweep owes (probe_b's included: it had none)
    wait_until(
        lambda: Effect.objects.filter(subscriber="probe_a", message_id=failing["message_id"]).exists(),
        what="the failing envelope to take effect",
    )
    assert refused == refusing
    assert Effect.objects.filter(subscriber="probe_a").count() == 3


@pytest.mark.rabbitmq
def test_a_pack_set_aside_after_some_of_it_was_processed_gets_letters_for_the_rest_only(broker, transactional_db):
    """A letter for a processed envelope could be replayed once its inbox row is pruned: applied twice."""
    from outbox.handling.dispatch import Outcome, dispatch

    done, left = envelopes(2)
    assert dispatch(subscriber="probe_a", body=done) is Outcome.PROCESSED
    queue = queue_name("probe_a")
    broker.declare_queue(queue, ensure=True)
    pack = pack_of([message_to("probe_a", envelope) for envelope in (done, left)])
    pack = pack.copy(kwargs={PACK: [done, left, "not an envelope"]})
    with pika.BlockingConnection(pika.URLParameters(broker_urls(settings.BROKER_URL)[0])) as connection:
        connection.channel().basic_publish("", xq_name(queue), pack.encode(), pika.BasicProperties(delivery_mode=2))

    assert collect_broker_dead_letters(broker, subscribers()) == 1

    letters = DeadLetter.objects.order_by("id")
    assert [letter.envelope for letter in letters] == [left, {"args": ["not an envelope"], "kwargs": {}}]


def test_a_pack_size_whose_packs_could_outgrow_a_broker_message_is_warned_of(settings):
    from outbox.core.conf import packs_fit_in_a_broker_message

    assert packs_fit_in_a_broker_message() == []  # the defaults: 20 x 64 KiB
    settings.OUTBOX_RELAY_PACK_SIZE = 1000

    assert [warning.id for warning in packs_fit_in_a_broker_message()] == ["outbox.W001"]


def test_an_envelope_that_fails_in_a_pack_is_retried_after_the_backoff_of_a_first_retry(worker, broker, enqueues):
    """The delay Dramatiq's Retries would have given it alone: the actor's min_backoff, jittered up to
    twice that. One step further (the backoff of a second retry) is two to four times it."""
    watched = enqueues()
    failing = envelopes(1, fail={"probe_a": "once"})[0]
    broker.enqueue(pack_of([message_to("probe_a", envelope) for envelope in [failing, *envelopes(1)]]))

    wait_until(lambda: Effect.objects.count() == 2, what="both envelopes to take effect, the failing one retried")
    [(retry, delay)] = [(m, delay) for m, delay in watched.alone(failing["message_id"]) if delay is not None]
    min_backoff = broker.get_actor(actor_name("probe_a")).options["min_backoff"]
    assert retry.options["retries"] == 1
    assert min_backoff <= delay < 2 * min_backoff


def test_a_stuck_envelope_in_a_pack_is_cut_off_at_the_packs_own_time_limit(worker, broker, enqueues):
    """A pack's `time_limit` option is what Dramatiq would have armed for it, so each of its envelopes
    gets that, not the actor's (here Dramatiq's default of ten minutes, which the stuck one is well within)."""
    time_limit_running(broker)
    watched = enqueues()
    stuck = envelopes(1, fail={"probe_a": "stuck"})[0]
    pack = pack_of([message_to("probe_a", envelope) for envelope in [stuck, *envelopes(1)]])
    pack.options["time_limit"] = 300  # ms

    broker.enqueue(pack)

    wait_until(lambda: Effect.objects.count() == 2, timeout=60, what="both envelopes to take effect")
    retried = [m.options.get("retries") for m, delay in watched.alone(stuck["message_id"]) if delay is not None]
    assert retried == [1]  # cut off in the pack, and retried alone (under the actor's limit, it is not cut again)
    # Run once in the pack (cut off; the pack's transaction was then handled again without it) and once alone.
    assert probe.runs[stuck["message_id"]] == 2


def test_a_time_limit_that_fires_between_two_envelopes_has_the_pack_retried_and_unpacked(worker, broker, enqueues):
    """The deadline fires outside any handler (here while the broker is slow to take a failing envelope's
    retry): it escapes the pack, Dramatiq's Retries enqueues the pack again, and that retry is unpacked,
    each envelope enqueued alone as a first attempt; the inbox skips what the first attempt did."""
    time_limit_running(broker)
    failing = envelopes(1, fail={"probe_a": "once"})[0]
    sent = [*envelopes(1), failing, *envelopes(2)]
    interrupted = threading.Event()

    def slow_to_take_the_first_retry(message):
        if message.message_id == failing["message_id"] and not interrupted.is_set():
            try:
                for _ in range(400):  # 20 s at most; short waits, so the time limit can interrupt them
                    threading.Event().wait(0.05)
            except TimeLimitExceeded:
                interrupted.set()
                raise

    watched = enqueues(slow_to_take_the_first_retry)
    pack = pack_of([message_to("probe_a", envelope) for envelope in sent])
    pack.options["time_limit"] = 300  # ms

    broker.enqueue(pack)

    wait_until(lambda: Effect.objects.count() == 4, timeout=60, what="every envelope to take effect")
    assert interrupted.is_set()
    assert [m.options.get("retries", 0) for m, delay in watched.seen if m.message_id == pack.message_id][:2] == [0, 1]
    first_attempts_alone = {m.message_id for m, _ in watched.seen if not m.kwargs and not m.options.get("retries")}
    assert first_attempts_alone == {envelope["message_id"] for envelope in sent}  # the retried pack, unpacked
    assert effects_per_message() == {1: 4}


def test_a_time_limit_whose_packs_could_outlast_rabbitmqs_consumer_timeout_is_warned_of(settings):
    from outbox.core.conf import packs_end_within_the_consumer_timeout

    def rabbitmq_with_a_time_limit_of(minutes: int) -> RabbitmqBroker:  # never connected
        return RabbitmqBroker(url="amqp://127.0.0.1:1/%2F", middleware=[TimeLimit(time_limit=minutes * 60_000)])

    assert packs_end_within_the_consumer_timeout(broker=rabbitmq_with_a_time_limit_of(10)) == []  # the default
    warnings = packs_end_within_the_consumer_timeout(broker=rabbitmq_with_a_time_limit_of(15))
    assert [warning.id for warning in warnings] == ["outbox.W002"]
    settings.OUTBOX_RELAY_PACK_SIZE = 1  # no packs
    assert packs_end_within_the_consumer_timeout(broker=rabbitmq_with_a_time_limit_of(15)) == []
