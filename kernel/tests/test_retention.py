"""Retention: prune_messages deletes what no guarantee needs any more, and nothing else."""

import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from outbox_tests.clocks import a_clock_off_by
from outbox_tests.probe.services import ping

from outbox.core.retention import prune, retention_outlives_redelivery
from outbox.models import DeadLetter, Heartbeat, InboxMessage, OutboxMessage, Stream, StreamCursor
from outbox.relaying.heartbeats import beat

pytestmark = pytest.mark.django_db(transaction=True)

LONG_AGO = timezone.now() - timedelta(days=90)


def an_event(*, published: bool, old: bool) -> OutboxMessage:
    row = OutboxMessage.objects.get(stream=f"ping:{ping(n=1).pk}")
    when = LONG_AGO if old else timezone.now()
    OutboxMessage.objects.filter(pk=row.pk).update(
        available_at=when, occurred_at=when, published_at=when if published else None
    )
    return row


def an_inbox_row(*, old: bool) -> InboxMessage:
    row = InboxMessage.objects.create(
        subscriber="probe_a", message_id=uuid.uuid4(), type="probe.pinged", correlation_id=uuid.uuid4()
    )
    if old:
        InboxMessage.objects.filter(pk=row.pk).update(processed_at=LONG_AGO)
    return row


def a_dead_letter(*, status: str, stream: str = "ping:0") -> DeadLetter:
    resolved = LONG_AGO if status != DeadLetter.Status.OPEN else None
    return DeadLetter.objects.create(
        subscriber="probe_a",
        message_id=uuid.uuid4(),
        envelope={"stream": stream},
        reason="handler_failed",
        first_failed_at=LONG_AGO,
        last_failed_at=LONG_AGO,
        status=status,
        resolved_at=resolved,
    )


def remaining(model) -> set[int]:
    return set(model.objects.values_list("pk", flat=True))


def test_prune_deletes_only_what_is_old_and_settled_in_batches():
    old_published = [an_event(published=True, old=True) for _ in range(5)]
    old_unpublished = an_event(published=False, old=True)  # a relay was down for months: still to send
    recent = an_event(published=True, old=False)
    old_inbox, new_inbox = [an_inbox_row(old=True) for _ in range(3)], an_inbox_row(old=False)
    discarded, still_open = a_dead_letter(status="discarded"), a_dead_letter(status="open", stream="ping:open")
    idle = StreamCursor.objects.create(subscriber="probe_a", stream="ping:gone")
    live = StreamCursor.objects.create(subscriber="probe_a", stream=recent.stream)
    awaiting_replay = StreamCursor.objects.create(subscriber="probe_a", stream="ping:open")
    batches = []

    results = prune(batch_size=2, on_batch=lambda p: batches.append((p.table, p.deleted)))

    assert remaining(OutboxMessage) == {old_unpublished.pk, recent.pk}
    assert remaining(InboxMessage) == {new_inbox.pk}
    assert remaining(DeadLetter) == {still_open.pk}
    assert remaining(StreamCursor) == {live.pk, awaiting_replay.pk}
    assert idle.pk not in remaining(StreamCursor) and discarded.pk not in remaining(DeadLetter)
    deleted = {p.table: p.deleted for p in results}
    assert deleted[OutboxMessage._meta.db_table] == len(old_published)
    assert deleted[InboxMessage._meta.db_table] == len(old_inbox)
    assert (OutboxMessage._meta.db_table, 4) in batches  # two rows a transaction, reported as it goes


def test_a_window_inside_the_redelivery_horizon_is_refused(settings):
    an_inbox_row(old=True)
    with pytest.raises(ValueError, match="redelivery horizon"):
        prune(older_than=timedelta(days=1))
    with pytest.raises(CommandError, match="choose a longer window"):
        call_command("prune_messages", "--older-than-days", "1", stdout=StringIO())
    assert InboxMessage.objects.count() == 1

    settings.OUTBOX_RETENTION_SECONDS = 3600
    assert [e.id for e in retention_outlives_redelivery()] == ["outbox.E001"]


def test_the_command_reports_progress_and_what_it_deleted():
    for _ in range(3):
        an_inbox_row(old=True)
    out = StringIO()

    call_command("prune_messages", "--batch-size", "2", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0] == "pruning what is older than 30 days (batches of 2)"
    assert "  outbox_inboxmessage: 3 deleted (2 batches)" in lines
    assert "outbox_inboxmessage 3" in lines[-1]
    assert InboxMessage.objects.count() == 0


def test_the_inbox_row_of_a_message_with_a_letter_that_could_be_replayed_is_kept():
    guarded = {status: an_inbox_row(old=True) for status in ("open", "replayed", "processed", "discarded")}
    for status, inbox in guarded.items():
        letter = a_dead_letter(status=status)
        DeadLetter.objects.filter(pk=letter.pk).update(message_id=inbox.message_id)

    prune()

    # A replay of the open or replayed letter must still meet the inbox row that makes it a no-op.
    assert remaining(InboxMessage) == {guarded["open"].pk, guarded["replayed"].pk}


def test_a_stream_whose_replayed_letter_is_still_queued_keeps_its_position_and_its_counter():
    a_dead_letter(status="replayed", stream="ping:replaying")
    waiting = StreamCursor.objects.create(subscriber="probe_a", stream="ping:replaying", last_sequence=7)
    StreamCursor.objects.create(subscriber="probe_a", stream="ping:idle", last_sequence=3)
    Stream.objects.create(name="ping:replaying", last_sequence=7)
    Stream.objects.create(name="ping:idle", last_sequence=3)

    prune()

    assert remaining(StreamCursor) == {waiting.pk}  # the replay must not apply as if it were next
    assert set(Stream.objects.values_list("name", flat=True)) == {"ping:replaying"}  # the idle counter is gone


def test_the_heartbeats_of_processes_silent_for_a_day_are_forgotten():
    now = timezone.now()
    for process, seen in (("relay@a:1", now), ("worker@b:2", now - timedelta(days=2))):
        Heartbeat.objects.create(process=process, kind="relay", started_at=seen, last_seen=seen)

    prune()

    assert list(Heartbeat.objects.values_list("process", flat=True)) == ["relay@a:1"]


@pytest.mark.postgres
def test_a_pruning_host_whose_clock_runs_days_ahead_forgets_no_live_process(monkeypatch):
    """Heartbeats are stamped on the database's clock (several hosts), and forgotten by it."""
    beat(process="worker@b:2", kind="worker", started_at=timezone.now())
    a_clock_off_by(monkeypatch, timedelta(days=2).total_seconds())

    prune()

    assert list(Heartbeat.objects.values_list("process", flat=True)) == ["worker@b:2"]
