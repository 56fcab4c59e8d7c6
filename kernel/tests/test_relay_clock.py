"""Leases and due times on the database's clock, and the next due time read from two index probes,
whatever the hosts' clocks say and however many timers are pending."""

import json
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from outbox_tests.clocks import a_clock_off_by
from outbox_tests.probe.events import ProbePinged
from outbox_tests.probe.services import ping

from outbox.models import OutboxMessage
from outbox.relaying.relay import Relay

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def test_a_relay_whose_clock_runs_ahead_never_takes_rows_another_relay_holds(transactional_db, monkeypatch):
    for n in range(3):
        ping(n=n)
    assert len(Relay(lease_seconds=30).claim_batch()) == 3  # another relay, on a right clock, is sending them

    a_clock_off_by(monkeypatch, 60)  # this relay's host is a minute ahead: past that lease, by its clock

    assert Relay().claim_batch() == []
    assert Relay().seconds_until_next_due() > 25


def test_an_event_published_on_a_host_whose_clock_runs_ahead_is_due_at_once(transactional_db, monkeypatch):
    a_clock_off_by(monkeypatch, 120)
    ping(n=1)
    monkeypatch.undo()

    assert [row.type for row in Relay().claim_batch()] == ["probe.pinged"]


def test_the_next_due_time_reads_a_few_rows_whatever_the_number_of_pending_timers(transactional_db):
    later = timezone.now() + timedelta(days=30)
    OutboxMessage.objects.bulk_create(
        OutboxMessage(
            type=ProbePinged.type,
            version=1,
            source="probe",
            occurred_at=later,
            correlation_id=uuid.uuid4(),
            stream=f"timer:{n}",
            sequence=1,
            payload={"n": n},
            available_at=later + timedelta(seconds=n),
        )
        for n in range(20_000)
    )
    ping(n=1)
    Relay(lease_seconds=30).claim_batch()  # one row leased, 20,000 timers a month ahead
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {OutboxMessage._meta.db_table}")

    with CaptureQueriesContext(connection) as queries:
        seconds = Relay().seconds_until_next_due()

    assert 25 < seconds <= 30  # the lease ends first
    for query in queries.captured_queries:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query['sql']}")
            plan = cursor.fetchone()[0]
        assert rows_read(plan if isinstance(plan, list) else json.loads(plan)) < 100, query["sql"]


def rows_read(plan) -> int:
    """Rows every scan of the outbox table read, in an EXPLAIN ANALYZE plan."""
    total = 0
    for node in _nodes(plan[0]["Plan"]):
        if node.get("Relation Name") == OutboxMessage._meta.db_table:
            total += node["Actual Rows"] * node.get("Actual Loops", 1) + node.get("Rows Removed by Filter", 0)
    return total


def _nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)
