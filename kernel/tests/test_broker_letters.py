"""What Dramatiq failed into a subscriber's `.XQ` (RabbitMQ), moved into the dead-letter store by
the relay's sweeper (outbox.relaying.broker_letters)."""

import pika
import pytest
from django.conf import settings
from django.db import DatabaseError, transaction
from dramatiq.common import xq_name
from outbox_tests.probe.services import ping

from outbox.console.dead_letter_actions import discard_dead_letter, replay_dead_letter
from outbox.core.brokers import broker_urls
from outbox.core.dead_letters import record_dead_letter, resolve_processed
from outbox.core.envelope import Envelope
from outbox.core.subscriptions import message_to, pack_of, queue_name, subscribers
from outbox.handling.dispatch import Outcome, dispatch
from outbox.models import DeadLetter, OutboxMessage
from outbox.relaying.broker_letters import collect_broker_dead_letters

pytestmark = [pytest.mark.integration, pytest.mark.rabbitmq]


def envelopes(count: int) -> list[dict]:
    return [OutboxMessage.objects.get(stream=f"ping:{ping(n=n).pk}").envelope() for n in range(count)]


def set_aside(broker, subscriber: str, message) -> str:
    """Put `message` in `subscriber`'s .XQ, as Dramatiq's rejection of it would; the queue's name."""
    queue = queue_name(subscriber)
    broker.declare_queue(queue, ensure=True)  # with its .XQ
    with pika.BlockingConnection(pika.URLParameters(broker_urls(settings.BROKER_URL)[0])) as connection:
        connection.channel().basic_publish("", xq_name(queue), message.encode(), pika.BasicProperties(delivery_mode=2))
    return xq_name(queue)


def waiting_in(broker, queue: str) -> int:
    return broker.channel.queue_declare(queue, passive=True).method.message_count


@pytest.mark.postgres
def test_a_message_whose_letter_cannot_be_written_stays_in_xq_for_the_next_sweep(broker, dead_letter_store_down):
    sent = envelopes(2)
    xq = set_aside(broker, "probe_a", pack_of([message_to("probe_a", envelope) for envelope in sent]))

    with pytest.raises(DatabaseError, match="dead-letter store unavailable"):
        collect_broker_dead_letters(broker, subscribers())
    assert not DeadLetter.objects.exists()
    dead_letter_store_down()  # the database is back

    assert collect_broker_dead_letters(broker, subscribers()) == 1
    assert sorted(str(m) for m in DeadLetter.objects.values_list("message_id", flat=True)) == sorted(
        envelope["message_id"] for envelope in sent
    )
    assert waiting_in(broker, xq) == 0


def test_a_packed_envelope_another_subscriber_processed_still_gets_a_letter(broker, transactional_db):
    """Each subscriber has its own inbox: probe_b having processed an event is nothing to probe_a."""
    processed_by_b, processed_by_none = envelopes(2)
    assert dispatch(subscriber="probe_b", body=processed_by_b) is Outcome.PROCESSED
    set_aside(broker, "probe_a", pack_of([message_to("probe_a", e) for e in (processed_by_b, processed_by_none)]))

    assert collect_broker_dead_letters(broker, subscribers()) == 1

    letters = DeadLetter.objects.filter(subscriber="probe_a").order_by("id")
    assert [str(letter.message_id) for letter in letters] == [
        e["message_id"] for e in (processed_by_b, processed_by_none)
    ]


@pytest.mark.postgres
def test_an_unreadable_message_with_nul_bytes_becomes_a_letter_and_leaves_xq(broker, transactional_db):
    """PostgreSQL's jsonb holds no NUL character: kept as it came, the bytes of a binary message could
    never be written, and the message, given back to .XQ each time, would stop every sweep there."""
    queue = queue_name("probe_a")
    broker.declare_queue(queue, ensure=True)
    with pika.BlockingConnection(pika.URLParameters(broker_urls(settings.BROKER_URL)[0])) as connection:
        connection.channel().basic_publish("", xq_name(queue), b"\x1f\x8b\x00binary", pika.BasicProperties())

    assert collect_broker_dead_letters(broker, subscribers()) == 1

    letter = DeadLetter.objects.get()
    assert (letter.reason, letter.envelope) == ("unreadable", {"unreadable": "\x1f\ufffd\ufffdbinary", "bytes": 9})
    assert waiting_in(broker, xq_name(queue)) == 0


def test_a_pack_set_aside_in_xq_leaves_earlier_letters_their_reason_and_a_closed_one_closed(broker, transactional_db):
    """What the .XQ copy says (Dramatiq failed it) is less than an earlier letter of the same message
    says: that letter keeps its reason and status, and counts the attempt. Reopened, a letter its
    subscriber processed (its inbox row since pruned) could be replayed and applied twice."""
    failed, discarded, processed, replayed = sent = envelopes(4)
    for envelope in sent:
        record_dead_letter(subscriber="probe_a", body=envelope, reason="handler_error", attempts=4)
    letters = {str(letter.message_id): letter for letter in DeadLetter.objects.all()}
    discard_dead_letter(letter_id=letters[discarded["message_id"]].pk, by="ops", note="refunded")
    replay_dead_letter(letter_id=letters[replayed["message_id"]].pk, by="ops")
    with transaction.atomic():  # processed after its letter was written, its inbox row since pruned
        resolve_processed(subscriber="probe_a", envelope=Envelope.model_validate(processed))
    set_aside(broker, "probe_a", pack_of([message_to("probe_a", envelope) for envelope in sent]))

    assert collect_broker_dead_letters(broker, subscribers()) == 1

    after = {str(letter.message_id): letter for letter in DeadLetter.objects.all()}
    assert {(e["message_id"], after[e["message_id"]].reason, after[e["message_id"]].status) for e in sent} == {
        (failed["message_id"], "handler_error", "open"),
        (discarded["message_id"], "handler_error", "discarded"),
        (processed["message_id"], "handler_error", "processed"),
        (replayed["message_id"], "handler_error", "replayed"),
    }
    assert {letter.attempts for letter in after.values()} == {5}
    assert {letter.exception_type for letter in after.values()} == {
        ""
    }  # the earlier error kept, not SetAsideByTheBroker's


@pytest.mark.postgres
def test_an_envelope_no_letter_can_hold_is_kept_as_text_and_leaves_xq(broker, transactional_db):
    """A NUL in a payload (jsonb refuses it) would have made its letter fail at every sweep, the
    message given back to .XQ each time and holding the queue for ever."""
    [envelope] = envelopes(1)
    envelope["payload"]["note"] = "a NUL \x00 here"
    xq = set_aside(broker, "probe_a", message_to("probe_a", envelope))

    assert collect_broker_dead_letters(broker, subscribers()) == 1

    letter = DeadLetter.objects.get()
    assert letter.reason == "unreadable" and "\\u0000" in letter.envelope["unreadable"]
    assert envelope["message_id"] in letter.envelope["unreadable"]
    assert waiting_in(broker, xq) == 0


@pytest.mark.postgres
def test_a_queue_whose_letter_cannot_be_written_leaves_the_other_queues_collected(broker, transactional_db):
    """The store refuses probe_a's letters only: probe_b's .XQ is emptied all the same, probe_a's
    message waits in its .XQ for the next sweep, and the sweep still says it failed."""
    from django.db import connection

    first, second = envelopes(2)
    xq_a = set_aside(broker, "probe_a", message_to("probe_a", first))
    xq_b = set_aside(broker, "probe_b", message_to("probe_b", second))
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION probe_refuse_probe_a() RETURNS trigger AS $$
            BEGIN
              IF NEW.subscriber = 'probe_a' THEN RAISE EXCEPTION 'probe_a''s letters refused'; END IF;
              RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER probe_refuse_probe_a BEFORE INSERT ON outbox_deadletter
              FOR EACH ROW EXECUTE FUNCTION probe_refuse_probe_a();
            """
        )
    try:
        with pytest.raises(DatabaseError, match="probe_a's letters refused"):
            collect_broker_dead_letters(broker, subscribers())
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER probe_refuse_probe_a ON outbox_deadletter; DROP FUNCTION probe_refuse_probe_a();"
            )

    assert list(DeadLetter.objects.values_list("subscriber", flat=True)) == ["probe_b"]
    assert (waiting_in(broker, xq_a), waiting_in(broker, xq_b)) == (1, 0)
