"""The redelivery sweep's figures: its capacity settling acknowledged rows, and its lag while
relayed, acknowledged events keep arriving behind a backlog."""

import json
import threading
import time
import uuid

from django.db import connection
from django.test.utils import override_settings

from harness.bench import empty_the_outbox_and_queues, publish_events
from outbox.core.subscriptions import subscribers
from outbox.core.working_database import kernel_databases
from outbox.models import InboxMessage, OutboxMessage
from outbox.placement import database_of_subscriber as of_subscriber
from outbox.relaying.sweep import Sweeper, lag_seconds, sweep_unacknowledged


def sweep_settling(events: int) -> float:
    """Seconds the redelivery sweep takes to settle `events` relayed rows that every recipient has
    acknowledged (an inbox row each), all past their grace: its capacity, when nothing is lost."""
    empty_the_outbox_and_queues()
    publish_events(events)
    outbox, inbox = OutboxMessage._meta.db_table, InboxMessage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {outbox} SET published_at = now() - interval '1 hour'")
        cursor.execute(
            f"INSERT INTO {inbox} (subscriber, message_id, type, correlation_id, processed_at, duplicates) "
            f"SELECT r, message_id, type, correlation_id, now(), 0 "
            f"FROM {outbox}, jsonb_array_elements_text(recipients) AS r"
        )
    _inbox_rows_where_they_belong()
    began = time.perf_counter()
    swept = sweep_unacknowledged()
    seconds = time.perf_counter() - began
    if swept.settled != events:
        raise RuntimeError(f"the sweep settled {swept.settled} of {events} acknowledged rows")
    return seconds


def _inbox_rows_where_they_belong() -> None:
    """With a context on a database of its own, its subscribers' inbox rows are there: moved."""
    for database in kernel_databases()[1:]:
        theirs = InboxMessage.objects.filter(subscriber__in=[s for s in subscribers() if of_subscriber(s) == database])
        rows = list(theirs)
        for row in rows:
            row.pk = None
        InboxMessage.objects.using(database).bulk_create(rows)
        theirs.delete()


def relayed_and_acknowledged(
    count: int, *, seconds_ago: float, acknowledged_by=("probe_a", "probe_b")
) -> set[uuid.UUID]:
    """`count` events the relay sent `seconds_ago`, each processed by `acknowledged_by`: written in
    two statements, as fast as a busy system produces them (PostgreSQL). Their message ids (another
    thread writing at once may take higher row ids than these)."""
    outbox, inbox = OutboxMessage._meta.db_table, InboxMessage._meta.db_table
    recipients = json.dumps(["probe_a", "probe_b"])
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH rows AS (
                INSERT INTO {outbox} (message_id, type, version, source, occurred_at, correlation_id, stream, sequence,
                    hops, payload, available_at, published_at, claimed_by, send_attempts, target_subscriber,
                    recipients, trace_context, resends)
                SELECT gen_random_uuid(), 'probe.pinged', 1, 'probe', t, gen_random_uuid(),
                    'load:' || gen_random_uuid(), 1, 0, '{{"n": 0}}', t, t, '', 1, '', %s, '{{}}', 0
                FROM generate_series(1, %s), (SELECT now() - make_interval(secs => %s) AS t) AS sent
                RETURNING message_id, correlation_id
            )
            INSERT INTO {inbox} (subscriber, message_id, type, correlation_id, processed_at, duplicates)
            SELECT s, message_id, 'probe.pinged', correlation_id, now(), 0 FROM rows, unnest(%s::text[]) AS s
            RETURNING message_id
            """,
            [recipients, count, seconds_ago, list(acknowledged_by)],
        )
        return {message_id for (message_id,) in cursor.fetchall()}


def sweep_lag_at_load(*, rate: int, seconds: float, backlog: int, grace: float = 2.0) -> float:
    """The largest lag of a sweeper (grace and interval `grace`) while `rate` relayed and acknowledged
    events a second arrive behind a `backlog` left by an outage, sampled once it has run twice."""
    empty_the_outbox_and_queues()
    stop, lags = threading.Event(), []
    with override_settings(OUTBOX_SWEEP_GRACE_SECONDS=grace, OUTBOX_SWEEP_INTERVAL_SECONDS=grace):
        relayed_and_acknowledged(backlog, seconds_ago=60)
        sweeper = Sweeper(stop)
        began = time.monotonic()
        sweeper.start()
        try:
            while time.monotonic() - began < seconds:
                relayed_and_acknowledged(rate // 10, seconds_ago=0)
                if time.monotonic() - began > 2 * grace:
                    lags.append(lag_seconds())
                stop.wait(0.1)
        finally:
            stop.set()
            sweeper.join(60)
    return max(lags, default=0.0)
