"""Order within a stream, for subscriptions declared `ordered=True`.

Transport gives no order across retries, replays and several workers, so an ordered subscriber
keeps a cursor per stream: an event older than one already applied is dropped as stale, and a
jump past the next number is logged and counted as a gap (the missing events, if they come,
will be stale).
"""

import logging
from enum import StrEnum

from django.db import connection
from django.db.models import F

from outbox.models import StreamCursor

logger = logging.getLogger(__name__)


class Position(StrEnum):
    NEXT = "next"
    GAP = "gap"
    STALE = "stale"


def advance(*, subscriber: str, stream: str, sequence: int) -> Position:
    """Move the subscriber's cursor on `stream` to `sequence`, or say why not. Runs in the caller's transaction."""
    cursor_id, last_sequence = _locked_cursor(subscriber, stream)
    if sequence <= last_sequence:
        StreamCursor.objects.filter(pk=cursor_id).update(stale=F("stale") + 1)
        logger.info("%s dropped stale %s#%d (already at #%d)", subscriber, stream, sequence, last_sequence)
        return Position.STALE
    missing = sequence - last_sequence - 1
    StreamCursor.objects.filter(pk=cursor_id).update(last_sequence=sequence, gaps=F("gaps") + missing)
    if missing:
        # Counted (the admin's overview shows it) and logged at INFO: workers handling a stream's
        # events at once reorder them as a matter of course; a lost one is the sweep's to resend.
        logger.info("%s saw a gap in %s: #%d after #%d", subscriber, stream, sequence, last_sequence)
        return Position.GAP
    return Position.NEXT


def _locked_cursor(subscriber: str, stream: str) -> tuple[int, int]:
    """(id, last_sequence) of the subscriber's cursor on `stream`, made at 0 if it is new, locked
    until the transaction ends. One statement and no savepoint (a SELECT, then an INSERT in a
    savepoint and a SELECT again, took five for a new stream): a concurrent first message of the
    same stream waits on the unique index, then takes the row the other one committed."""
    table = connection.ops.quote_name(StreamCursor._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (subscriber, stream, last_sequence, gaps, stale) VALUES (%s, %s, 0, 0, 0) "
            f"ON CONFLICT (subscriber, stream) DO UPDATE SET stale = {table}.stale RETURNING id, last_sequence",
            [subscriber, stream],
        )
        return cursor.fetchone()
