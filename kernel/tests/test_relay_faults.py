"""The relay under errors that are not a broker outage: poison rows, odd exceptions, replays in flight."""

import threading
from contextlib import contextmanager
from datetime import timedelta

import dramatiq
import psycopg
import pytest
import redis
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping
from outbox_tests.relaying import in_thread
from outbox_tests.sessions import connection_params
from outbox_tests.waiting import wait_until

from outbox.console.dead_letter_actions import CannotResolve, replay_dead_letter
from outbox.core.dead_letters import record_dead_letter
from outbox.core.subscriptions import queue_name
from outbox.models import DeadLetter, OutboxMessage
from outbox.relaying import leases
from outbox.relaying.relay import BrokerUnavailable, Relay

pytestmark = pytest.mark.integration


class FaultyBroker:
    """The real broker behind a door that can fail: sending the chosen messages (or all) raises `error`.

    Dramatiq's middleware cannot inject this (it logs and swallows what a `before_enqueue` raises).
    """

    def __init__(self, broker: dramatiq.Broker):
        self.broker, self.error, self.message_ids, self.queues = broker, None, None, None

    @contextmanager
    def failing(self, error: Exception, rows: list[OutboxMessage] | None = None, *, to: str | None = None):
        """Fail the copies of `rows` (or of every row), or only those to subscriber `to`."""
        self.error, self.message_ids = error, None if rows is None else {str(r.message_id) for r in rows}
        self.queues = None if to is None else {queue_name(to)}
        try:
            yield
        finally:
            self.error = None

    def enqueue(self, message, *, delay=None):
        chosen = self.message_ids is None or message.message_id in self.message_ids
        if self.error is not None and chosen and (self.queues is None or message.queue_name in self.queues):
            raise self.error
        return self.broker.enqueue(message, delay=delay)


def rows_of(pings) -> list[OutboxMessage]:
    return [OutboxMessage.objects.get(stream=f"ping:{p.pk}") for p in pings]


def test_a_row_set_aside_whose_mark_fails_is_never_marked_published_without_its_letter(
    broker, transactional_db, settings, monkeypatch
):
    settings.OUTBOX_RELAY_MAX_SEND_ATTEMPTS = 1
    poison, *others = rows_of([ping(n=n) for n in range(3)])
    door = FaultyBroker(broker)
    relay = Relay(broker=door, lease_seconds=0.05)
    mark = leases.mark_published

    def mark_failing_over(rows):  # the database goes away as the poison row is set aside (a failover)
        if any(row.pk == poison.pk for row in rows):
            raise DatabaseError("server closed the connection unexpectedly")
        mark(rows)

    with door.failing(redis.exceptions.ResponseError("OOM command not allowed"), [poison], to="probe_b"):
        monkeypatch.setattr(leases, "mark_published", mark_failing_over)
        with pytest.raises(DatabaseError):
            relay.relay_batch()
        monkeypatch.setattr(leases, "mark_published", mark)
        assert not DeadLetter.objects.exists()  # rolled back with the mark

        relay.unsettled.settle()  # what the next round writes back first
        poison.refresh_from_db()
        assert poison.published_at is None, "marked published, and its letter lost"

        OutboxMessage.objects.filter(pk=poison.pk).update(claimed_until=timezone.now())  # its lease runs out
        relay.relay_batch()
    poison.refresh_from_db()
    assert poison.published_at is not None
    assert [(d.subscriber, d.reason) for d in DeadLetter.objects.all()] == [("probe_b", "unsendable")]
    assert OutboxMessage.objects.filter(pk__in=[o.pk for o in others], published_at__isnull=True).count() == 0


def test_a_poison_row_is_set_aside_as_a_dead_letter_and_the_rows_behind_it_flow(broker, transactional_db, settings):
    settings.OUTBOX_RELAY_MAX_SEND_ATTEMPTS = 3
    poison, *others = rows_of([ping(n=n) for n in range(5)])
    door = FaultyBroker(broker)
    relay = Relay(broker=door, lease_seconds=0.05)

    with door.failing(redis.exceptions.ResponseError("OOM command not allowed"), [poison], to="probe_b"):
        assert relay.relay_batch() == 4  # the others go through at once
        for attempt in (2, 3):  # its lease runs out, and it is tried again, alone to blame
            OutboxMessage.objects.filter(pk=poison.pk).update(claimed_until=timezone.now())
            assert relay.relay_batch() == 0
            poison.refresh_from_db()
            assert poison.send_attempts == attempt

    assert OutboxMessage.objects.filter(published_at__isnull=True).count() == 0
    # Only probe_b never got it: probe_a's copy went through each time, and a letter for it would
    # deliver the event a second time once the inbox row that guards it is pruned.
    letters = DeadLetter.objects.order_by("subscriber")
    assert [(d.subscriber, d.reason, d.attempts, d.message_id) for d in letters] == [
        ("probe_b", "unsendable", 3, poison.message_id),
    ]
    assert "OOM command not allowed" in letters[0].error


def test_a_row_whose_envelope_cannot_be_built_is_set_aside_from_its_stored_fields(broker, transactional_db, settings):
    settings.OUTBOX_RELAY_MAX_SEND_ATTEMPTS = 2
    broken, *others = rows_of([ping(n=n) for n in range(3)])
    OutboxMessage.objects.filter(pk=broken.pk).update(trace_context=["not", "a", "mapping"])
    relay = Relay(broker=broker)

    assert relay.relay_batch() == 2
    OutboxMessage.objects.filter(pk=broken.pk).update(claimed_until=timezone.now())  # its lease runs out
    assert relay.relay_batch() == 0  # no exception out of the relay: the row is set aside

    broken.refresh_from_db()
    assert broken.published_at is not None
    letters = DeadLetter.objects.order_by("subscriber")
    assert [(d.subscriber, d.reason) for d in letters] == [("probe_a", "unsendable"), ("probe_b", "unsendable")]
    assert letters[0].envelope["message_id"] == str(broken.message_id)
    assert "traceparent" not in letters[0].envelope and letters[0].envelope["payload"] == broken.payload


def test_rows_confirmed_before_an_error_are_marked_and_the_rest_released_uncounted(broker, transactional_db):
    first, *failing = rows_of([ping(n=n) for n in range(3)])

    door = FaultyBroker(broker)
    timeout = redis.exceptions.TimeoutError("Timeout reading from socket")
    with door.failing(timeout, failing), pytest.raises(BrokerUnavailable):
        Relay(broker=door).relay_batch()

    first.refresh_from_db()
    assert first.published_at is not None
    for row in failing:
        row.refresh_from_db()
        assert (row.published_at, row.claimed_by, row.send_attempts) == (None, "", 0)


def test_the_relay_outlives_any_error_and_backs_off_until_it_passes(broker, worker, caplog, settings):
    settings.OUTBOX_RELAY_POLL_SECONDS = 0.05
    ping(n=1)
    stop, progress_failures = threading.Event(), []

    def progress(_relay):
        if not progress_failures:
            progress_failures.append(1)
            raise ValueError("a broken progress display")

    door = FaultyBroker(broker)
    with door.failing(RuntimeError("something nobody expected")):
        running = in_thread(Relay(broker=door).run, stop=stop, on_progress=progress)
        try:
            wait_until(lambda: "relay paused" in caplog.text, what="the relay to back off")
            assert running.is_alive()
        except BaseException:
            stop.set()
            raise
    try:
        wait_until(
            lambda: not OutboxMessage.objects.filter(published_at__isnull=True).exists(),
            what="the relay to go on once the error stops",
        )
        wait_until(lambda: progress_failures, what="the progress callback to have failed once")
        wait_until(lambda: "relay resumed" in caplog.text, what="the relay to resume")
        assert running.is_alive()
    finally:
        stop.set()
        running.join(10)
    assert "something nobody expected" in caplog.text and "relay resumed" in caplog.text


def test_a_replay_reset_while_an_older_send_was_in_flight_is_sent_again(transactional_db):
    body = rows_of([ping(n=1)])[0].envelope()
    letter = record_dead_letter(subscriber="probe_b", body=body, reason="handler_error")
    replay_dead_letter(letter_id=letter.pk, by="ops")
    in_flight = Relay().claim_batch()  # the first replay is being sent...
    record_dead_letter(subscriber="probe_b", body=body, reason="handler_error")  # ...and failed again, quickly
    replay_dead_letter(letter_id=letter.pk, by="ops")  # so the operator replays once more

    Relay().mark_published([r for r in in_flight if r.target_subscriber])  # the first send's confirm arrives

    second = OutboxMessage.objects.get(message_id=body["message_id"], target_subscriber="probe_b")
    assert (second.published_at, second.claimed_by) == (None, "")  # still to send


def test_a_relay_never_claims_rows_another_relay_holds_under_lease(transactional_db):
    for n in range(10):
        ping(n=n)
    held = Relay(lease_seconds=30).claim_batch()  # another relay is sending them

    assert len(held) == 10
    assert Relay().claim_batch() == []


def test_a_row_leased_by_another_relay_is_not_due_until_its_lease_ends(transactional_db):
    ping(n=1)
    Relay(lease_seconds=30).claim_batch()  # another relay is sending it

    assert Relay().seconds_until_next_due() > 25


def test_who_receives_an_event_is_decided_when_it_is_published_not_by_the_relaying_code(
    broker, transactional_db, monkeypatch
):
    from outbox.core import subscriptions

    row = rows_of([ping(n=1)])[0]
    assert row.recipients == ["probe_a", "probe_b"]
    older_code = {s: handlers for s, handlers in subscriptions._subscriptions.items() if s != "probe_b"}
    with monkeypatch.context() as deploy:  # a relay of an older release, which has no probe_b yet
        deploy.setattr(subscriptions, "_subscriptions", older_code)
        assert Relay(broker=broker).drain() == 1

    worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    try:
        wait_until(lambda: Effect.objects.filter(subscriber="probe_b").exists(), what="probe_b's copy to arrive")
    finally:
        worker.stop(timeout=10_000)
    assert Effect.objects.filter(subscriber="probe_a").count() == 1


def test_a_replay_to_a_subscriber_that_no_longer_exists_is_refused(transactional_db):
    body = rows_of([ping(n=1)])[0].envelope()
    letter = record_dead_letter(subscriber="probe_gone", body=body, reason="handler_error")

    with pytest.raises(CannotResolve, match="probe_gone no longer handles probe.pinged"):
        replay_dead_letter(letter_id=letter.pk, by="ops")

    assert not OutboxMessage.objects.filter(target_subscriber="probe_gone").exists()
    assert DeadLetter.objects.get(pk=letter.pk).status == "open"


class LostWithTheDatabase(FaultyBroker):
    """Sending fails, and by then the relay's database session is gone too (a primary that died)."""

    def __init__(self, broker: dramatiq.Broker, admin: psycopg.Connection, pid: int):
        super().__init__(broker)
        self.admin, self.pid = admin, pid

    def enqueue(self, message, *, delay=None):
        self.admin.execute("SELECT pg_terminate_backend(%s, 5000)", [self.pid])
        raise redis.exceptions.TimeoutError("cut off")


@pytest.mark.postgres
def test_claims_the_database_lost_with_a_failed_send_are_given_back_at_the_next_round(broker, transactional_db):
    """A primary that dies mid-round takes the relay's release of its unsent rows with it; on
    the promoted server they are still claimed. They are given back at the next round, not left
    for a whole lease."""
    rows = rows_of([ping(n=n) for n in range(2)])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    with psycopg.connect(**connection_params(), autocommit=True) as admin:
        relay = Relay(broker=LostWithTheDatabase(broker, admin, pid))
        with pytest.raises(BrokerUnavailable):
            relay.relay_batch()
    assert len(relay.unsettled.to_release) == 2
    close_old_connections()
    for row in rows:
        row.refresh_from_db()
        assert row.claimed_by != "" and row.published_at is None  # still under lease

    relay.broker = broker  # what a relay's broker connection is after reconnecting
    assert relay.drain() == 2  # given back, then sent: no wait for the 30 s lease
    assert len(relay.unsettled) == 0
    assert OutboxMessage.objects.filter(published_at__isnull=True).count() == 0


@pytest.mark.postgres
def test_a_claim_whose_commit_the_relay_never_heard_of_is_given_back_at_its_next_round(broker, transactional_db):
    """The database went away as the claim committed (the replica has it, the relay got an error):
    the rows are leased to a token only that relay knew, and it gives them back by that token."""
    ping(n=1)
    relay = Relay(broker=broker)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    with psycopg.connect(**connection_params(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    with pytest.raises(DatabaseError):
        relay.claim_batch()  # refused: the session is gone
    (token,) = relay.unsettled.claims
    close_old_connections()
    leases.claim(lease=timedelta(seconds=30), batch_size=10, token=token)  # as if it had committed
    assert OutboxMessage.objects.filter(claimed_by=token).count() == 1

    assert relay.drain() == 1  # given back by its token, then sent: no wait for the lease
    assert len(relay.unsettled) == 0


class DatabaseGoneBeforeTheMark(Relay):
    """The broker confirmed the copies; the database goes away before they are marked sent."""

    def __init__(self, *args, admin: psycopg.Connection, pid: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.admin, self.pid = admin, pid

    def mark_published(self, rows):
        if self.pid is not None and rows:  # the first call may carry no row yet: no statement to fail
            self.admin.execute("SELECT pg_terminate_backend(%s, 5000)", [self.pid])
            self.pid = None
        super().mark_published(rows)


@pytest.mark.postgres
def test_copies_confirmed_while_the_database_was_away_are_not_sent_again(broker, transactional_db):
    ping(n=1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    with psycopg.connect(**connection_params(), autocommit=True) as admin:
        relay = DatabaseGoneBeforeTheMark(broker=broker, admin=admin, pid=pid)
        with pytest.raises(DatabaseError):
            relay.drain()
    assert len(relay.unsettled.to_mark) == 1
    close_old_connections()
    assert relay.drain() == 0  # marked, not sent a second time
    assert OutboxMessage.objects.get().published_at is not None
