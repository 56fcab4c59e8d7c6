"""Dispatch through a real worker: exactly-once effect, retries, and dead letters."""

import pytest
from django.conf import settings
from dramatiq import Retry
from dramatiq.middleware import CurrentMessage
from outbox_tests.letters import envelope
from outbox_tests.probe.models import Effect, Ping
from outbox_tests.waiting import wait_until

from outbox.core.subscriptions import actor_name, message_to
from outbox.handling.dispatch import dispatch
from outbox.models import DeadLetter, InboxMessage

pytestmark = pytest.mark.integration


def effects(subscriber: str, **filters) -> int:
    return Effect.objects.filter(subscriber=subscriber, **filters).count()


def test_the_same_message_delivered_twice_takes_effect_once(worker, deliver):
    body = envelope()
    deliver("probe_a", body)
    deliver("probe_a", body)

    wait_until(
        lambda: InboxMessage.objects.filter(message_id=body["message_id"], duplicates=1).exists(),
        what="the second copy to be skipped",
    )
    assert effects("probe_a", message_id=body["message_id"]) == 1


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"payload": {"n": "not a number"}}, "invalid_payload"),
        ({"type": "probe.unheard_of"}, "unknown_type"),
        ({"version": 9}, "unsupported_version"),
        ({"hops": 99}, "loop_detected"),
        ({"message_id": "not-a-uuid"}, "invalid_envelope"),
    ],
)
def test_an_unacceptable_message_is_dead_lettered_at_once(worker, deliver, broker, overrides, reason):
    deliver("probe_a", envelope(**overrides))

    letter = wait_until(lambda: DeadLetter.objects.filter(subscriber="probe_a").first(), what="a dead letter")
    broker.join(f"{settings.OUTBOX_QUEUE_PREFIX}probe_a", timeout=10_000)
    worker.join()
    letter.refresh_from_db()
    assert (letter.reason, letter.attempts, letter.status) == (reason, 1, "open")
    assert letter.envelope["type"] == overrides.get("type", "probe.pinged")
    assert effects("probe_a") == 0


def test_a_handler_that_swallows_its_services_error_is_retried_then_dead_lettered_not_acked(worker, deliver, broker):
    # The service raised inside outbox.placement.atomic, which joins the handler's transaction
    # without a savepoint: the transaction is marked for rollback, the handler returns anyway.
    body = envelope(payload={"n": 1, "fail": {"probe_a": "swallow"}})
    deliver("probe_a", body)

    letter = wait_until(lambda: DeadLetter.objects.filter(subscriber="probe_a").first(), what="a dead letter")
    assert (letter.reason, letter.attempts) == ("handler_error", settings.OUTBOX_MAX_RETRIES + 1)
    assert letter.exception_type == "outbox.handling.dispatch.WorkRolledBack"
    assert "went on after an error rolled its transaction back" in letter.error
    assert not InboxMessage.objects.filter(subscriber="probe_a").exists()  # nothing pretends it was processed
    assert not Ping.objects.filter(n=1).exists()  # the service's write stayed rolled back


@pytest.mark.parametrize(
    "mode",
    [
        "swallow_insert_row",  # insert_row() of a key already there, an IntegrityError the handler catches
        pytest.param("swallow_sql", marks=pytest.mark.postgres),  # a service's own SQL (SQLite keeps the rest)
    ],
)
def test_a_handler_that_catches_a_failed_hand_written_statement_is_retried_then_dead_lettered(
    worker, deliver, broker, mode
):
    """PostgreSQL aborts the transaction at the failed statement, and a COMMIT then rolls it back
    without a word: processed, acknowledged, with its work and its inbox row gone. The statements
    written by hand mark the transaction as the ORM's save() does, and dispatch asks PostgreSQL
    itself whether the transaction is aborted, whoever sent the statement."""
    body = envelope(payload={"n": 1, "fail": {"probe_a": mode}})
    deliver("probe_a", body)

    letter = wait_until(lambda: DeadLetter.objects.filter(subscriber="probe_a").first(), what="a dead letter")
    assert (letter.reason, letter.attempts) == ("handler_error", settings.OUTBOX_MAX_RETRIES + 1)
    assert letter.exception_type == "outbox.handling.dispatch.WorkRolledBack"
    assert not InboxMessage.objects.filter(subscriber="probe_a").exists()
    assert not Ping.objects.filter(n=1).exists()


def test_a_transient_error_that_clears_on_the_second_attempt_is_processed_once(worker, deliver, broker):
    body = envelope(payload={"n": 1, "fail": {"probe_a": "once"}})
    deliver("probe_a", body)

    wait_until(lambda: effects("probe_a"), what="the retried message to be processed")
    broker.join(f"{settings.OUTBOX_QUEUE_PREFIX}probe_a", timeout=10_000)
    worker.join()
    assert effects("probe_a", message_id=body["message_id"]) == 1
    assert not DeadLetter.objects.exists()


def test_a_permanent_error_is_dead_lettered_after_the_bounded_retries(worker, deliver):
    body = envelope(payload={"n": 1, "fail": {"probe_a": "always"}})
    deliver("probe_a", body)

    letter = wait_until(
        lambda: DeadLetter.objects.filter(message_id=body["message_id"]).first(), what="retries to run out"
    )
    assert letter.reason == "handler_error"
    assert letter.attempts == settings.OUTBOX_MAX_RETRIES + 1
    assert letter.exception_type == "outbox_tests.probe.handlers.Misbehaving"
    assert "told to fail always" in letter.traceback
    assert letter.first_failed_at < letter.last_failed_at
    assert effects("probe_a") == 0 and not InboxMessage.objects.exists()


def test_a_handler_that_rejects_a_message_dead_letters_it_with_its_own_reason(worker, deliver):
    deliver("probe_a", envelope(payload={"n": 1, "fail": {"probe_a": "reject"}}))

    letter = wait_until(lambda: DeadLetter.objects.first(), what="a dead letter")
    assert (letter.reason, letter.attempts) == ("probe_refused", 1)


def test_a_late_retry_waits_no_longer_than_the_max_backoff(transactional_db, broker, settings):
    """The backoff doubles with each retry up to OUTBOX_MAX_BACKOFF_MS, the actor's max_backoff:
    uncapped, a sixteenth retry waits min_backoff x 2**15 (with the defaults, nine hours and more)."""
    settings.OUTBOX_MAX_RETRIES = 20
    body = envelope(payload={"n": 1, "fail": {"probe_a": "always"}})
    late = message_to("probe_a", body)
    late.options["retries"] = 15
    max_backoff = broker.get_actor(actor_name("probe_a")).options["max_backoff"]

    token = CurrentMessage._MESSAGE.set(late)  # as a worker's thread has it
    try:
        with pytest.raises(Retry) as retry:
            dispatch(subscriber="probe_a", body=body)
    finally:
        CurrentMessage._MESSAGE.reset(token)

    assert max_backoff // 2 <= retry.value.delay <= max_backoff  # jittered within the cap, as Dramatiq's own
