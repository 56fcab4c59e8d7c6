import json
import uuid
from datetime import timedelta

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from outbox_tests.probe.events import ProbeEchoed, ProbePinged
from outbox_tests.probe.models import Ping
from outbox_tests.probe.services import Exploded, ping
from pydantic import ValidationError

from outbox.core.envelope import Envelope
from outbox.core.publishing import (
    _ENVELOPE_BESIDE_PAYLOAD,
    EventTooLarge,
    PublishOutsideTransaction,
    handling,
    outbox_row,
    publish,
    publish_many,
)
from outbox.models import OutboxMessage
from outbox.observability.tracing import LIMITS


@pytest.mark.django_db(transaction=True)
def test_a_failing_service_keeps_neither_its_state_nor_its_event():
    with pytest.raises(Exploded):
        ping(n=1, explode=True)

    assert Ping.objects.count() == 0
    assert OutboxMessage.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_publish_outside_a_transaction_is_refused():
    with pytest.raises(PublishOutsideTransaction, match="transaction.atomic"):
        publish(ProbePinged(n=1), stream="ping:1")
    assert OutboxMessage.objects.count() == 0


@pytest.mark.django_db
def test_a_committed_service_writes_state_and_event_together():
    record = ping(n=7)

    row = OutboxMessage.objects.get()
    assert Ping.objects.get() == record
    assert (row.type, row.version, row.payload) == ("probe.pinged", 1, {"n": 7, "fail": {}})
    assert row.causation_id is None and row.hops == 0 and row.published_at is None
    assert Envelope.model_validate(row.envelope()).message_id == row.message_id


def test_an_invalid_payload_never_reaches_the_outbox():
    with pytest.raises(ValidationError):
        ProbePinged(n="not a number")


@pytest.mark.django_db
def test_sequence_counts_per_stream():
    with transaction.atomic():
        first = [publish(ProbeEchoed(n=i), stream="echo:a").sequence for i in range(3)]
        other = publish(ProbeEchoed(n=9), stream="echo:b").sequence

    assert first == [1, 2, 3]
    assert other == 1


@pytest.mark.django_db
def test_publish_many_numbers_one_streams_events_in_order_after_those_before_in_one_statement():
    later = timezone.now() + timedelta(hours=1)
    with transaction.atomic():
        publish(ProbeEchoed(n=0), stream="echo:many")
        with CaptureQueriesContext(connection) as statements:
            rows = publish_many(
                [ProbeEchoed(n=i) for i in (1, 2, 3)], stream="echo:many", available_at=[None, later, None]
            )
        after = publish(ProbeEchoed(n=4), stream="echo:many")

    assert len(statements) == (1 if connection.vendor == "postgresql" else 6)  # SQLite: numbered one by one
    stored = OutboxMessage.objects.filter(stream="echo:many").order_by("sequence")
    assert [(row.sequence, row.payload["n"]) for row in stored] == [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4)]
    assert [row.sequence for row in rows] == [2, 3, 4] and after.sequence == 5
    assert [row.id for row in rows] == [row.id for row in stored[1:4]]  # each row told its own id
    assert len({row.correlation_id for row in stored[1:4]}) == 1  # one story, as publish() starts one per call
    assert stored[2].available_at == later  # a time given is kept; the others are due on the database's clock
    assert stored[1].available_at <= timezone.now() and stored[3].available_at <= timezone.now()


@pytest.mark.django_db(transaction=True)
def test_every_field_reads_back_as_published_whatever_the_statements_shape():
    """The statement's text is built once per shape (how many rows, which are due now) and its
    values bound without Django's per-field conversions where psycopg takes them as they are: each
    shape, used twice and in turn, must store every field of every row as the row returned says."""
    later = timezone.now() + timedelta(minutes=5)
    cause = a_cause(hops=2)
    returned = []
    for _ in range(2):
        with transaction.atomic():
            returned += publish_many(
                [ProbeEchoed(n=1), ProbeEchoed(n=2)], stream="echo:shape", available_at=[later, None]
            )
            returned.append(publish(ProbeEchoed(n=3), stream="echo:shape"))
            with handling(cause):
                returned += publish_many([ProbeEchoed(n=4), ProbeEchoed(n=5)], stream="echo:shape")

    stored = {row.id: row for row in OutboxMessage.objects.filter(stream="echo:shape")}
    assert len(stored) == len(returned) == 10
    for row in returned:
        assert stored[row.id].envelope() == row.envelope()
        for field in ("recipients", "trace_context", "available_at", "sequence", "published_at", "claimed_by"):
            assert getattr(stored[row.id], field) == getattr(row, field), field
    assert [row.sequence for row in returned] == list(range(1, 11))
    assert {row.causation_id for row in returned[3:5]} == {cause.message_id} and returned[3].hops == 3
    assert stored[returned[0].id].available_at == later


@pytest.mark.django_db(transaction=True)
def test_publish_many_refuses_outside_a_transaction_and_times_that_do_not_match_the_events():
    with pytest.raises(PublishOutsideTransaction, match="probe.echoed, probe.echoed"):
        publish_many([ProbeEchoed(n=1), ProbeEchoed(n=2)], stream="echo:refused")
    with transaction.atomic(), pytest.raises(ValueError, match="2 events but 1 times"):
        publish_many([ProbeEchoed(n=1), ProbeEchoed(n=2)], stream="echo:refused", available_at=[None])
    assert OutboxMessage.objects.count() == 0


def a_cause(*, hops: int) -> Envelope:
    """The message a handler is handling, `hops` away from its origin."""
    return Envelope(
        message_id=uuid.uuid4(),
        type="probe.pinged",
        version=1,
        occurred_at="2026-01-01T00:00:00Z",
        correlation_id=uuid.uuid4(),
        stream="ping:1",
        sequence=1,
        hops=hops,
        payload={"n": 1},
    )


@pytest.mark.django_db
def test_an_event_published_while_handling_inherits_correlation_and_counts_a_hop():
    cause = a_cause(hops=2)
    with transaction.atomic(), handling(cause):
        row = publish(ProbeEchoed(n=2), stream="echo:a")
        same = publish(ProbeEchoed(n=3), stream="echo:a", correlation_id=cause.correlation_id)

    assert row.correlation_id == cause.correlation_id
    assert row.causation_id == cause.message_id
    assert row.hops == 3
    assert (same.correlation_id, same.hops) == (cause.correlation_id, 3)


@pytest.mark.django_db
def test_a_handler_starting_another_story_keeps_the_cause_and_counts_hops_from_zero():
    """A drone freed by one delivery takes the next: that is the next delivery's story, not a loop."""
    cause = a_cause(hops=7)
    other_story = uuid.uuid4()
    with transaction.atomic(), handling(cause):
        row = publish(ProbeEchoed(n=2), stream="echo:a", correlation_id=other_story)

    assert (row.correlation_id, row.causation_id, row.hops) == (other_story, cause.message_id, 0)


@pytest.mark.django_db
def test_the_origin_takes_the_correlation_id_it_is_given():
    correlation = uuid.uuid4()
    with transaction.atomic():
        row = publish(ProbeEchoed(n=1), stream="echo:a", correlation_id=correlation)
    assert row.correlation_id == correlation and row.causation_id is None


@pytest.mark.django_db(transaction=True)
def test_an_event_over_the_size_bound_is_refused_before_anything_is_written(settings):
    settings.OUTBOX_MAX_EVENT_BYTES = 2_000
    too_large = r"probe.pinged is [\d,]+ bytes serialized, over OUTBOX_MAX_EVENT_BYTES"

    with pytest.raises(EventTooLarge, match=too_large), transaction.atomic():
        publish(ProbePinged(n=1, fail={"probe_a": "x" * 2_000}), stream="ping:1")

    assert OutboxMessage.objects.count() == 0
    with transaction.atomic():  # below the bound: written, and first in its stream
        row = publish(ProbePinged(n=1, fail={"probe_a": "x" * 100}), stream="ping:1")
    assert row.sequence == 1


@pytest.mark.django_db(transaction=True)
def test_an_envelope_is_refused_exactly_when_its_serialized_size_is_over_the_bound(settings):
    """publish() settles most events by their payload's JSON alone (written once, for the INSERT
    too) and serializes the whole envelope only near the bound: the answer must be the same as if
    it serialized every envelope."""
    settings.OUTBOX_MAX_EVENT_BYTES = limit = 10_000
    for n, size in enumerate(range(5_000, 10_001, 250)):
        event = ProbePinged(n=n, fail={"probe_a": "é" * (size // 6)})  # escaped: 6 bytes a character
        envelope_size = len(
            json.dumps(
                outbox_row(event, stream="ping:size", correlation_id=uuid.uuid4(), now=timezone.now()).envelope(),
                separators=(",", ":"),
            )
        )
        with transaction.atomic():
            if envelope_size > limit:
                with pytest.raises(EventTooLarge):
                    publish(event, stream="ping:size")
            else:
                row = publish(event, stream="ping:size")
                assert OutboxMessage.objects.get(pk=row.pk).payload == event.model_dump(mode="json")
    assert 0 < OutboxMessage.objects.filter(stream="ping:size").count() < n + 1


def test_an_envelopes_fields_beside_its_payload_stay_under_the_size_bound():
    """The longest type and stream the columns hold, every character escaped, a full trace context."""
    longest = OutboxMessage(
        message_id=uuid.uuid4(),
        type="t" * OutboxMessage._meta.get_field("type").max_length,
        version=2**31 - 1,
        occurred_at=timezone.now(),
        correlation_id=uuid.uuid4(),
        causation_id=uuid.uuid4(),
        stream="\u2603" * OutboxMessage._meta.get_field("stream").max_length,
        sequence=2**63 - 1,
        hops=2**31 - 1,
        payload={},
        trace_context={key: "x" * limit for key, limit in LIMITS.items()},
    )
    beside = len(json.dumps(longest.envelope(), separators=(",", ":"))) - len("{}")
    assert beside < _ENVELOPE_BESIDE_PAYLOAD, beside


@pytest.mark.django_db
@pytest.mark.postgres
def test_statements_are_prepared_unless_a_transaction_pooler_is_between(settings):
    from django.db import connection

    ping(n=1)
    ping(n=2)
    for _ in range(6):  # past psycopg's threshold (5 runs): the next run of a statement prepares it
        OutboxMessage.objects.filter(stream="ping:prepared").exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cursor.fetchall()]
    if settings.DATABASE_TRANSACTION_POOLER:
        # PgBouncer before 1.21 cannot carry a prepared statement from one transaction to the next.
        assert prepared == []
    else:  # the outbox insert at once (prepare=True), and an ORM query run five times
        assert any("WITH numbered AS" in statement for statement in prepared), prepared
        assert any('"outbox_outboxmessage"."stream" = $2 LIMIT 1' in statement for statement in prepared), prepared


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_value_the_database_refuses_is_djangos_data_error_as_from_the_orm():
    """publish() sends its insert through psycopg's own cursor; its errors are Django's all the same,
    so dispatch sets aside a handler's refused value as unprocessable at once (a DataError) and
    the API answers a lost connection with 503 (an OperationalError), instead of a retry and a 500."""
    with pytest.raises(DataError, match="\\\\u0000"):
        ping(n=1, fail={"probe_a": "a NUL \x00 in jsonb"})
    assert not Ping.objects.exists() and not OutboxMessage.objects.exists()


@pytest.mark.django_db
@pytest.mark.postgres
def test_each_statement_shape_is_built_once_and_used_only_for_its_rows(monkeypatch):
    """The INSERT's text is cached by its shape: how many rows, and which of them are due now (the
    database's clock written into the SQL) or scheduled (their time bound). Started from an empty
    cache, shapes of the same length but other due rows must not share a statement: a scheduled
    row written as due would fire at once. The second round takes each shape as built."""
    from outbox.core import publishing

    monkeypatch.setattr(publishing, "_shapes", {})
    later = timezone.now() + timedelta(hours=1)
    shapes = [[None], [later], [None, later, None], [later, None, later], [None, None, None]]
    published, built = [], []
    for _ in range(2):
        for times in shapes:
            events = [ProbeEchoed(n=n) for n in range(len(times))]
            published.append((times, publish_many(events, stream="echo:cached", available_at=times)))
        built.append(dict(publishing._shapes))

    stored = {row.id: row for row in OutboxMessage.objects.filter(stream="echo:cached")}
    for times, rows in published:
        for at, row in zip(times, rows, strict=True):
            assert stored[row.id].available_at == row.available_at
            if at is None:
                assert stored[row.id].available_at < later, f"a due row of {times} scheduled"
            else:
                assert stored[row.id].available_at == later, f"a scheduled row of {times} due now"
    assert sorted(row.sequence for row in stored.values()) == list(range(1, 2 * 11 + 1))
    assert [row.sequence for _, rows in published for row in rows] == list(range(1, 2 * 11 + 1))
    assert len(built[0]) == len(shapes)  # one statement for each shape, built on its first use
    assert built[1].keys() == built[0].keys() and all(built[1][key] is built[0][key] for key in built[0])
