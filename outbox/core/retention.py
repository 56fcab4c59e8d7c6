"""Retention: `prune()` deletes what no guarantee needs once it is older than the retention window,
in batches of short transactions (`SKIP LOCKED`: it never waits on a relay or a handler):
published outbox rows, inbox rows, resolved dead letters, the cursors and counters of streams with
no event left, and the heartbeats of processes silent for a day. Never an unpublished row, a
letter that could still be replayed, nor the inbox row or stream position such a letter needs.

The window must outlive every horizon in which an old copy can still arrive (the message TTL, the
sweep's horizon): a system check says so. With a context on a database of its own, a stream idle
on one database is deleted only once the others have nothing of it either.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core import checks
from django.db import transaction
from django.utils import timezone

from outbox.core.dead_letters import REPLAYABLE
from outbox.core.working_database import connection, current, kernel_databases
from outbox.models import DeadLetter, Heartbeat, InboxMessage, OutboxMessage, Stream, StreamCursor

# A heartbeat not renewed for this long is a process that was killed: it leaves the overview.
HEARTBEAT_FORGOTTEN_AFTER = timedelta(days=1)


@dataclass
class Pruned:
    table: str
    deleted: int = 0
    batches: int = 0
    finished: bool = False


def redelivery_horizon() -> timedelta:
    """How long after it was sent a copy of a message can still be delivered."""
    return timedelta(seconds=max(settings.OUTBOX_MESSAGE_TTL_SECONDS, settings.OUTBOX_SWEEP_HORIZON_SECONDS))


def prune(
    *,
    older_than: timedelta | None = None,
    batch_size: int = 5_000,
    on_batch: Callable[[Pruned], None] | None = None,
) -> list[Pruned]:
    """Delete what is past the retention window, `batch_size` rows a transaction."""
    if older_than is not None and older_than <= redelivery_horizon():
        raise ValueError(
            f"a window of {older_than} would delete inbox rows of messages that can still be delivered "
            f"(redelivery horizon {redelivery_horizon()})"
        )
    cutoff = timezone.now() - (older_than or timedelta(seconds=settings.OUTBOX_RETENTION_SECONDS))
    return [
        _delete_in_batches(table, key, where, params, batch_size, on_batch)
        for table, key, where, params in _what_to_prune(cutoff)
    ]


def _what_to_prune(cutoff: datetime) -> list[tuple[str, str, str, list]]:
    outbox, inbox = OutboxMessage._meta.db_table, InboxMessage._meta.db_table
    letters, cursors = DeadLetter._meta.db_table, StreamCursor._meta.db_table
    streams, heartbeats = Stream._meta.db_table, Heartbeat._meta.db_table
    replayable = ", ".join(["%s"] * len(REPLAYABLE))

    def no_event_nor_replayable_letter_of(table: str) -> str:
        # A stream with no event left in the outbox has been idle for the whole window; a letter of
        # it that may still be replayed (open, or replayed with its copy still queued) needs its
        # position, or the old event would apply as if it were the next one.
        return (
            f"NOT EXISTS (SELECT 1 FROM {outbox} o WHERE o.stream = {table}.{_stream_column(table)} "
            "AND o.target_subscriber = '') "
            f"AND NOT EXISTS (SELECT 1 FROM {letters} d WHERE d.status IN ({replayable}) "
            f"AND d.envelope ->> 'stream' = {table}.{_stream_column(table)})"
        )

    return [
        (outbox, "id", "published_at < %s", [cutoff]),
        (
            inbox,
            "id",
            # A letter that may still be replayed needs the inbox row that turns a second copy into a no-op.
            f"processed_at < %s AND NOT EXISTS (SELECT 1 FROM {letters} d WHERE d.subscriber = {inbox}.subscriber "
            f"AND d.message_id = {inbox}.message_id AND d.status IN ({replayable}))",
            [cutoff, *REPLAYABLE],
        ),
        (letters, "id", f"status NOT IN ({replayable}) AND resolved_at < %s", [*REPLAYABLE, cutoff]),
        (cursors, "id", no_event_nor_replayable_letter_of(cursors), [*REPLAYABLE]),
        # The stream's counter goes once its cursors are gone: a stream that starts again at 1
        # then meets no cursor that remembers a higher number.
        (
            streams,
            "name",
            f"{no_event_nor_replayable_letter_of(streams)} "
            f"AND NOT EXISTS (SELECT 1 FROM {cursors} c WHERE c.stream = {streams}.name)",
            [*REPLAYABLE],
        ),
        _silent_for_a_day(heartbeats),
    ]


def _silent_for_a_day(heartbeats: str) -> tuple[str, str, str, list]:
    """Heartbeats are stamped with the database's clock on PostgreSQL (several hosts), read here
    on the same: a host whose clock runs a day ahead would forget live processes. SQLite: one host."""
    if connection.vendor == "postgresql":
        return heartbeats, "id", "last_seen < now() - %s", [HEARTBEAT_FORGOTTEN_AFTER]
    return heartbeats, "id", "last_seen < %s", [timezone.now() - HEARTBEAT_FORGOTTEN_AFTER]


def _in_use_elsewhere(streams: set[str], *, cursors: bool) -> set[str]:
    """Of `streams`, those another database has an event of, a letter of that may still be replayed,
    or (`cursors`) a cursor of: a stream's events are in its publisher's outbox, its cursors beside
    each subscriber's inbox. A database that does not answer fails the run: nothing is deleted."""
    busy: set[str] = set()
    for database in kernel_databases():
        if database == current():
            continue
        busy.update(
            OutboxMessage.objects.using(database)
            .filter(stream__in=streams, target_subscriber="")
            .values_list("stream", flat=True)
        )
        letters = DeadLetter.objects.using(database).filter(status__in=REPLAYABLE, envelope__stream__in=streams)
        busy.update(letters.values_list("envelope__stream", flat=True))
        if cursors:
            busy.update(
                StreamCursor.objects.using(database).filter(stream__in=streams).values_list("stream", flat=True)
            )
    return busy


def _delete_idle(cursor, table, key, where, params, batch_size, after, lock) -> tuple[int, int, object]:
    """One batch of the streams idle here, those idle on every other database deleted: how many,
    how many were looked at, and the batch's last key (the next starts after it: one busy elsewhere stays)."""
    since = f" AND {key} > %s" if after is not None else ""
    cursor.execute(
        f"SELECT {key}, {_stream_column(table)} FROM {table} WHERE {where}{since} ORDER BY {key} LIMIT %s{lock}",
        [*params, *([after] if after is not None else []), batch_size],
    )
    batch = cursor.fetchall()
    if not batch:
        return 0, 0, after
    busy = _in_use_elsewhere({stream for _, stream in batch}, cursors=table == Stream._meta.db_table)
    idle = [row_key for row_key, stream in batch if stream not in busy]
    if idle:
        cursor.execute(f"DELETE FROM {table} WHERE {key} IN ({', '.join(['%s'] * len(idle))})", idle)
    return len(idle), len(batch), batch[-1][0]


def _stream_column(table: str) -> str:
    return "name" if table == Stream._meta.db_table else "stream"


def _delete_in_batches(table, key, where, params, batch_size, on_batch) -> Pruned:
    pruned, after = Pruned(table), None
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    # A stream's cursors and counter, with a context on a database of its own: idle here, and asked
    # of the others too (a stream found idle here is locked until the batch is deleted).
    across = table in (StreamCursor._meta.db_table, Stream._meta.db_table) and len(kernel_databases()) > 1
    while True:
        with transaction.atomic(using=current()), connection.cursor() as cursor:
            if across:
                deleted, looked_at, after = _delete_idle(cursor, table, key, where, params, batch_size, after, lock)
            else:
                cursor.execute(
                    f"DELETE FROM {table} WHERE {key} IN "
                    f"(SELECT {key} FROM {table} WHERE {where} ORDER BY {key} LIMIT %s{lock})",
                    [*params, batch_size],
                )
                deleted = looked_at = cursor.rowcount
        pruned.deleted += deleted
        pruned.batches += 1
        pruned.finished = looked_at < batch_size
        if on_batch:
            on_batch(pruned)
        if pruned.finished:
            return pruned


@checks.register()
def retention_outlives_redelivery(app_configs=None, **kwargs):
    """An inbox row pruned while a copy of its message can still arrive would let it take effect twice."""
    if not redelivery_horizon().total_seconds() < settings.OUTBOX_RETENTION_SECONDS:
        return [
            checks.Error(
                f"OUTBOX_RETENTION_SECONDS ({settings.OUTBOX_RETENTION_SECONDS:.0f}) must exceed the longest "
                f"redelivery horizon ({redelivery_horizon()}: OUTBOX_MESSAGE_TTL_SECONDS, "
                "OUTBOX_SWEEP_HORIZON_SECONDS)",
                id="outbox.E001",
            )
        ]
    return []
