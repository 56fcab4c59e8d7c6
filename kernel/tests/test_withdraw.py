"""`withdraw_scheduled()` takes back a stream's timers still to fire, and nothing else: never an
event that is due (whatever the clocks of the hosts say), never a replay or a resend, which are
copies for one subscriber that the relay owes it."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone
from outbox_tests.probe.events import ProbePinged
from outbox_tests.probe.models import Ping
from outbox_tests.probe.services import ping

from outbox.console.dead_letter_actions import replay_dead_letter
from outbox.core.dead_letters import record_dead_letter
from outbox.core.publishing import PublishOutsideTransaction, publish, withdraw_scheduled
from outbox.models import DeadLetter, OutboxMessage
from outbox.relaying.relay import Relay

pytestmark = pytest.mark.integration


def a_clock_off_by(monkeypatch, seconds: float) -> None:
    """This process's clock, as a host whose clock is `seconds` off would read it."""
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(seconds=seconds))


def withdrawn(stream: str) -> int:
    with transaction.atomic():
        return withdraw_scheduled(stream=stream)


def test_a_timer_still_to_fire_is_withdrawn_and_an_event_due_is_kept(transactional_db):
    record = ping(n=1)  # due at once
    stream = f"ping:{record.pk}"
    with transaction.atomic():
        publish(ProbePinged(n=2), stream=stream, available_at=timezone.now() + timedelta(hours=1))

    assert withdrawn(stream) == 1

    assert list(OutboxMessage.objects.filter(stream=stream).values_list("payload__n", flat=True)) == [1]


@pytest.mark.postgres
def test_an_event_due_is_kept_when_the_withdrawing_hosts_clock_is_behind_the_databases(transactional_db, monkeypatch):
    """A host two seconds behind PostgreSQL ends a story (a customer cancels right after asking)
    while the relay lags: the story's first event, due at once on the database's clock, is later
    than the host's now. Deleted, it was never sent, and an ordered subscriber saw a gap for ever."""
    record = ping(n=1)
    stream = f"ping:{record.pk}"
    a_clock_off_by(monkeypatch, -2)

    assert withdrawn(stream) == 0

    monkeypatch.undo()
    assert [row.stream for row in Relay().claim_batch()] == [stream]  # still there, and the relay sends it


@pytest.mark.postgres
def test_an_event_committed_after_the_withdrawing_transaction_began_is_kept(transactional_db):
    """Read committed: the DELETE sees a row committed after its transaction began, due at once
    on the database's clock at a time later than that transaction's start."""
    stream = f"ping:{Ping.objects.create(n=0).pk}"
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")  # the transaction has begun, its now() is fixed
        published = threading.Event()

        def publish_meanwhile():
            try:
                with transaction.atomic():
                    publish(ProbePinged(n=1), stream=stream)
                published.set()
            finally:
                connections["default"].close()

        thread = threading.Thread(target=publish_meanwhile)
        thread.start()
        thread.join(30)
        assert published.is_set()

        assert withdraw_scheduled(stream=stream) == 0

    assert OutboxMessage.objects.filter(stream=stream).count() == 1


def test_a_replay_on_the_stream_is_kept_whatever_the_clock_of_the_host_that_replayed_it(transactional_db, monkeypatch):
    """A replay is a copy for one subscriber, due when an operator asked for it (on the admin
    host's clock, here a minute ahead): withdrawn, its letter said "replayed" for ever."""
    record = ping(n=1)
    stream = f"ping:{record.pk}"
    original = OutboxMessage.objects.get(stream=stream)
    OutboxMessage.objects.filter(pk=original.pk).update(published_at=timezone.now())
    letter = record_dead_letter(
        subscriber="probe_a", body=original.envelope(), reason="handler_error", error=ValueError("down")
    )
    a_clock_off_by(monkeypatch, 60)
    replay_dead_letter(letter_id=letter.pk, by="operator")
    monkeypatch.undo()

    assert withdrawn(stream) == 0

    assert OutboxMessage.objects.filter(stream=stream, target_subscriber="probe_a", published_at=None).exists()
    assert DeadLetter.objects.get(pk=letter.pk).status == "replayed"


def test_a_copy_the_sweep_sends_again_is_kept(transactional_db, monkeypatch):
    """A resend is owed to its subscriber, whatever the stream's story did since."""
    record = ping(n=1)
    stream = f"ping:{record.pk}"
    original = OutboxMessage.objects.get(stream=stream)
    resend = OutboxMessage.objects.create(
        **{
            field.attname: getattr(original, field.attname)
            for field in OutboxMessage._meta.concrete_fields
            if not field.primary_key
        }
        | {"target_subscriber": "probe_b", "recipients": ["probe_b"], "resends": 1},
    )
    OutboxMessage.objects.filter(pk=resend.pk).update(available_at=timezone.now() + timedelta(seconds=30))

    assert withdrawn(stream) == 0

    assert OutboxMessage.objects.filter(pk=resend.pk).exists()


def test_withdrawing_outside_a_transaction_is_refused_and_withdraws_nothing(transactional_db):
    """Outside the transaction of the change that makes them moot, a timer withdrawn would be gone
    even if that change then rolled back."""
    stream = f"ping:{Ping.objects.create(n=0).pk}"
    with transaction.atomic():
        publish(ProbePinged(n=1), stream=stream, available_at=timezone.now() + timedelta(hours=1))

    with pytest.raises(PublishOutsideTransaction, match="must run inside transaction.atomic"):
        withdraw_scheduled(stream=stream)

    assert OutboxMessage.objects.filter(stream=stream).count() == 1


def test_an_event_due_at_the_very_moment_of_withdrawing_is_kept(transactional_db, monkeypatch):
    """Due is not "still to come": on one host (SQLite) an event due at the instant the story ends
    has its due time equal to the clock the withdrawal reads, and it is kept."""
    stream = f"ping:{Ping.objects.create(n=0).pk}"
    instant = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: instant)
    with transaction.atomic():
        publish(ProbePinged(n=1), stream=stream)  # due at once

        assert withdraw_scheduled(stream=stream) == 0

    assert OutboxMessage.objects.filter(stream=stream).count() == 1
