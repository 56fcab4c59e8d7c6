"""Failure as data: replay and discard (service and command), compensation failures, expiry."""

import uuid

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from outbox_tests.letters import a_dead_letter
from outbox_tests.probe.models import Effect, Outage
from outbox_tests.probe.services import ping, request_undo
from outbox_tests.waiting import wait_until

from outbox.console.dead_letter_actions import CannotResolve, discard_dead_letter, replay_dead_letter
from outbox.core.dead_letters import record_dead_letter
from outbox.handling.dispatch import Outcome, dispatch
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.relaying.relay import Relay

pytestmark = pytest.mark.integration


def dead_letters_for(subscriber: str, count: int):
    return wait_until(
        lambda: (
            list(DeadLetter.objects.filter(subscriber=subscriber, status="open"))
            if DeadLetter.objects.filter(subscriber=subscriber, status="open").count() == count
            else None
        ),
        what=f"{count} open dead letter(s) for {subscriber}",
    )


def relay_everything(broker) -> None:
    Relay(broker=broker).drain()


def test_a_replay_after_the_fault_is_fixed_is_processed_once_by_that_subscriber_only(worker, broker):
    Outage.objects.create(subscriber="probe_b")
    ping(n=1, fail={"probe_b": "outage"})
    relay_everything(broker)
    [letter] = dead_letters_for("probe_b", 1)
    wait_until(lambda: Effect.objects.filter(subscriber="probe_a").count() == 1, what="probe_a to process it")

    Outage.objects.all().delete()
    replay_dead_letter(letter_id=letter.pk, by="ops", note="disk replaced")
    relay_everything(broker)

    wait_until(lambda: Effect.objects.filter(subscriber="probe_b").count() == 1, what="the replay to be processed")
    letter.refresh_from_db()
    assert (letter.status, letter.replays, letter.resolved_by) == ("processed", 1, "dispatch")
    assert "ops replayed] disk replaced" in letter.note  # who replayed it stays on record
    assert Effect.objects.filter(subscriber="probe_a").count() == 1  # the replay went to probe_b alone
    assert InboxMessage.objects.filter(subscriber="probe_a", duplicates=0).count() == 1


def test_a_replay_that_fails_again_reopens_the_same_letter_with_attempts_added(worker, broker):
    Outage.objects.create(subscriber="probe_b")
    ping(n=1, fail={"probe_b": "outage"})
    relay_everything(broker)
    [letter] = dead_letters_for("probe_b", 1)

    replay_dead_letter(letter_id=letter.pk, by="ops")
    relay_everything(broker)

    tries = settings.OUTBOX_MAX_RETRIES + 1
    wait_until(lambda: DeadLetter.objects.get(pk=letter.pk).attempts == 2 * tries, what="the replay to die again")
    letter.refresh_from_db()
    assert (letter.status, letter.replays, DeadLetter.objects.count()) == ("open", 1, 1)


def test_replaying_a_message_the_subscriber_already_processed_has_no_second_effect(worker, broker):
    ping(n=1)
    relay_everything(broker)
    wait_until(lambda: Effect.objects.count() == 2, what="both subscribers to process it")
    row = OutboxMessage.objects.get()
    letter = DeadLetter.objects.create(  # as if an operator kept a stale letter of a processed message
        subscriber="probe_b",
        message_id=row.message_id,
        type=row.type,
        envelope=row.envelope(),
        reason="handler_error",
        first_failed_at=row.occurred_at,
        last_failed_at=row.occurred_at,
    )

    replay_dead_letter(letter_id=letter.pk)
    relay_everything(broker)

    wait_until(
        lambda: InboxMessage.objects.filter(subscriber="probe_b", duplicates=1).exists(),
        what="the replay to be dropped as a duplicate",
    )
    assert Effect.objects.filter(subscriber="probe_b").count() == 1


def test_discard_needs_a_note_and_closes_the_letter_for_good(worker, broker):
    ping(n=1, fail={"probe_b": "always"})
    relay_everything(broker)
    [letter] = dead_letters_for("probe_b", 1)

    with pytest.raises(CannotResolve, match="note"):
        discard_dead_letter(letter_id=letter.pk, by="ops", note=" ")
    discard_dead_letter(letter_id=letter.pk, by="ops", note="customer refunded")

    letter.refresh_from_db()
    assert letter.status == "discarded" and "customer refunded" in letter.note and letter.resolved_at
    with pytest.raises(CannotResolve, match="discarded"):
        replay_dead_letter(letter_id=letter.pk)


def test_the_command_lists_and_replays_a_group(worker, broker, capsys):
    Outage.objects.create(subscriber="probe_b")
    for n in range(3):
        ping(n=n, fail={"probe_b": "outage"})
    relay_everything(broker)
    dead_letters_for("probe_b", 3)

    call_command("dead_letters", "list", "--groups")
    header, group = capsys.readouterr().out.splitlines()
    assert group.split()[0] == "3" and group.split()[2] == "probe_b"  # one group of three
    with pytest.raises(CommandError, match="needs dead-letter ids"):
        call_command("dead_letters", "replay")
    Outage.objects.all().delete()
    call_command(
        "dead_letters", "replay", "--subscriber", "probe_b", "--reason", "handler_error", "--type", "probe.pinged"
    )
    assert "replayed 3 dead letter(s)" in capsys.readouterr().out
    relay_everything(broker)

    wait_until(lambda: Effect.objects.filter(subscriber="probe_b").count() == 3, what="the group to be processed")
    wait_until(
        lambda: set(DeadLetter.objects.values_list("status", flat=True)) == {"processed"},
        what="each replayed letter closed as processed",
    )


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_a_replay_or_discard_without_ids_or_filters_names_every_filter_it_would_take(db, action):
    with pytest.raises(CommandError, match="needs dead-letter ids or at least one of ") as refused:
        call_command("dead_letters", action, "--note", "why")
    named = str(refused.value).rsplit("at least one of ", 1)[1].split(", ")

    assert "--group" in named
    for option in named:  # each one it names is enough alone: no such refusal
        try:
            call_command("dead_letters", action, option, "x", "--note", "why")
        except CommandError as error:
            assert "needs dead-letter ids" not in str(error), option


def test_a_replay_naming_a_letter_that_is_no_longer_open_replays_none_of_the_letters_it_names(db):
    discarded, still_open = a_dead_letter(), a_dead_letter()
    discard_dead_letter(letter_id=discarded.pk, by="ops", note="customer refunded")

    with pytest.raises(CommandError, match=f"nothing replayed: dead letter {discarded.pk} is discarded, not open"):
        call_command("dead_letters", "replay", str(discarded.pk), str(still_open.pk))

    still_open.refresh_from_db()
    assert (still_open.status, still_open.replays, still_open.resolved_at) == ("open", 0, None)
    assert not OutboxMessage.objects.filter(message_id=still_open.message_id).exists()  # nothing sent again


def test_a_compensation_that_keeps_failing_is_dead_lettered_as_compensation_failed(worker, broker):
    request_undo(n=1, fail={"probe_a": "always"})
    relay_everything(broker)

    [letter] = dead_letters_for("probe_a", 1)
    assert (letter.reason, letter.attempts) == ("compensation_failed", settings.OUTBOX_MAX_RETRIES + 1)


def test_a_compensation_that_fails_transiently_is_retried_and_done_once(worker, broker):
    request_undo(n=1, fail={"probe_a": "once"})
    relay_everything(broker)

    wait_until(lambda: Effect.objects.filter(type="probe.undo_requested").count() == 1, what="the retried undo")
    assert not DeadLetter.objects.exists()


def test_a_message_past_its_ttl_is_dead_lettered_as_expired(worker, broker, settings):
    settings.OUTBOX_MESSAGE_TTL_SECONDS = -1
    ping(n=1)
    relay_everything(broker)

    letters = wait_until(
        lambda: DeadLetter.objects.count() == 2 and list(DeadLetter.objects.all()), what="both copies to expire"
    )
    assert {letter.reason for letter in letters} == {"expired"}
    assert not Effect.objects.exists()


def test_an_old_copy_of_a_processed_message_is_a_duplicate_not_expired(worker, broker, settings):
    ping(n=1)
    relay_everything(broker)
    wait_until(lambda: Effect.objects.count() == 2, what="both subscribers to process it")
    settings.OUTBOX_MESSAGE_TTL_SECONDS = -1  # every copy from now on is too old
    OutboxMessage.objects.update(published_at=None)  # the relay sends it again (as after a crash)

    relay_everything(broker)

    wait_until(lambda: InboxMessage.objects.filter(duplicates=1).count() == 2, what="both copies to be skipped")
    assert not DeadLetter.objects.exists()


def test_a_discarded_letter_stays_discarded_when_its_message_fails_again(db):

    body = OutboxMessage.objects.get(stream=f"ping:{ping(n=1).pk}").envelope()
    letter = record_dead_letter(subscriber="probe_b", body=body, reason="handler_error")
    discard_dead_letter(letter_id=letter.pk, by="ops", note="customer refunded")

    record_dead_letter(subscriber="probe_b", body=body, reason="handler_error", attempts=4)

    letter.refresh_from_db()
    assert (letter.status, letter.attempts) == ("discarded", 5)


@pytest.mark.postgres
def test_a_dead_letter_that_cannot_be_written_is_retried_until_it_can_be(
    dead_letter_store_down, worker, broker, caplog
):
    ping(n=1, fail={"probe_b": "always"})
    relay_everything(broker)

    wait_until(
        lambda: caplog.text.count("dead-letter store unavailable") >= 3,
        what="writing the dead letter to fail on several attempts past the handler's retries",
    )
    assert not DeadLetter.objects.exists()
    dead_letter_store_down()  # the database is back

    [letter] = dead_letters_for("probe_b", 1)
    assert (letter.reason, letter.type) == ("handler_error", "probe.pinged")


def test_a_handler_stopped_by_the_time_limit_is_dead_lettered_like_any_failure(worker, broker):
    from dramatiq.middleware import TimeLimit
    from outbox_tests.letters import envelope

    from outbox.core.subscriptions import message_to

    time_limit = next(m for m in broker.middleware if isinstance(m, TimeLimit))
    if not time_limit.manager.is_alive():
        time_limit.after_process_boot(broker)  # what `rundramatiq` does at boot; an in-process Worker does not
    message = message_to("probe_b", envelope(payload={"n": 1, "fail": {"probe_b": "stuck"}}))
    message.options["time_limit"] = 100  # ms; Dramatiq's TimeLimit interrupts with a BaseException

    broker.enqueue(message)

    [letter] = dead_letters_for("probe_b", 1)
    assert letter.reason == "handler_error" and letter.exception_type.endswith("TimeLimitExceeded")
    assert letter.attempts == settings.OUTBOX_MAX_RETRIES + 1


def test_a_letter_of_a_message_its_subscriber_processes_later_is_closed_and_cannot_be_replayed(transactional_db):
    # The sweep gave up while probe_b's workers were down; then they came back and took the queued copy.
    row = OutboxMessage.objects.get(stream=f"ping:{ping(n=1).pk}")
    letter = record_dead_letter(subscriber="probe_b", body=row.envelope(), reason="never_acknowledged")

    assert dispatch(subscriber="probe_b", body=row.envelope()) is Outcome.PROCESSED

    letter.refresh_from_db()
    assert (letter.status, letter.resolved_by) == ("processed", "dispatch")
    assert "was processed after it was dead-lettered" in letter.note
    with pytest.raises(CannotResolve, match="processed, not open"):
        replay_dead_letter(letter_id=letter.pk, by="ops")  # a month later, once the inbox row is pruned
    assert Effect.objects.filter(subscriber="probe_b").count() == 1


def test_a_letter_written_after_its_message_was_processed_is_closed_by_the_next_copy(transactional_db):
    row = OutboxMessage.objects.get(stream=f"ping:{ping(n=1).pk}")
    assert dispatch(subscriber="probe_b", body=row.envelope()) is Outcome.PROCESSED
    letter = record_dead_letter(subscriber="probe_b", body=row.envelope(), reason="unsendable")

    assert dispatch(subscriber="probe_b", body=row.envelope()) is Outcome.DUPLICATE  # which tells it was processed

    letter.refresh_from_db()
    assert letter.status == "processed"
    assert Effect.objects.filter(subscriber="probe_b").count() == 1


def test_a_replay_once_processed_is_closed_as_processed(transactional_db):
    row = OutboxMessage.objects.get(stream=f"ping:{ping(n=1).pk}")
    letter = record_dead_letter(subscriber="probe_b", body=row.envelope(), reason="handler_error")
    replay_dead_letter(letter_id=letter.pk, by="ops")

    assert dispatch(subscriber="probe_b", body=row.envelope()) is Outcome.PROCESSED

    letter.refresh_from_db()
    assert (letter.status, letter.replays) == ("processed", 1)


def test_a_message_without_an_envelope_argument_is_a_dead_letter_at_once_not_dramatiqs_retries(worker, broker):
    """A message on a subscriber's queue with no arguments failed every retry with a
    TypeError into Dramatiq's own dead-letter queue, which the console never shows."""
    import dramatiq

    from outbox.core.subscriptions import actor_name, queue_name

    broker.enqueue(
        dramatiq.Message(
            queue_name=queue_name("probe_a"), actor_name=actor_name("probe_a"), args=(), kwargs={}, options={}
        )
    )

    letter = wait_until(lambda: DeadLetter.objects.filter(subscriber="probe_a").first(), what="a dead letter")
    assert (letter.reason, letter.attempts, letter.envelope) == ("invalid_envelope", 1, {"args": [], "kwargs": {}})


@pytest.mark.rabbitmq
def test_a_message_that_is_not_dramatiqs_is_an_unreadable_dead_letter(worker, broker, start_relay, settings):
    """Bytes Dramatiq cannot decode were rejected into the queue's .XQ, and stayed there:
    the relay's sweeper now moves what waits there into the store, acknowledged once recorded."""
    import pika
    from dramatiq.common import xq_name

    from outbox.core.brokers import broker_urls
    from outbox.core.subscriptions import queue_name

    settings.OUTBOX_SWEEP_INTERVAL_SECONDS = 0.2
    queue = queue_name("probe_a")
    with pika.BlockingConnection(pika.URLParameters(broker_urls(settings.BROKER_URL)[0])) as connection:
        connection.channel().basic_publish("", queue, b"not json at all", pika.BasicProperties(delivery_mode=2))
    start_relay()

    letter = wait_until(lambda: DeadLetter.objects.filter(subscriber="probe_a").first(), what="an unreadable letter")
    assert letter.reason == "unreadable" and letter.envelope == {"unreadable": "not json at all", "bytes": 15}
    assert broker.channel.queue_declare(xq_name(queue), passive=True).method.message_count == 0  # acknowledged


def test_the_list_has_a_header_one_row_a_letter_and_refuses_a_reason_no_letter_can_have(db, capsys):
    record_dead_letter(
        subscriber="probe_b",
        body={"message_id": str(uuid.uuid4()), "type": "probe.pinged"},
        reason="invalid_payload",
        error=ValueError("2 validation errors for Pinged\nn\n  Field required"),
    )
    record_dead_letter(subscriber="probe_a", body="not an envelope", reason="invalid_envelope", error=ValueError("x"))

    call_command("dead_letters", "list")
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:5] == ["id", "status", "subscriber", "reason", "event"]
    assert len(rows) == 2  # the three-line error kept to its row
    assert rows[0].endswith("2 validation errors for Pinged n Field required")
    assert " ? " in rows[1]  # a letter with no event type says so

    with pytest.raises(CommandError, match=r"no such reason: no_such_reason \(the reasons are invalid_envelope, "):
        call_command("dead_letters", "list", "--reason", "no_such_reason")
    call_command("dead_letters", "list", "--groups", "--reason", "expired")  # a reason of the kernel's, none yet
    assert capsys.readouterr().out == "no dead letters match\n"
