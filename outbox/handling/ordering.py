"""Order within a stream, for subscriptions declared `ordered=True`.

Transport gives no order across retries, replays and several workers, so an ordered subscriber
keeps a cursor per stream: an event older than one already applied is dropped as stale, and a
jump past the next number is logged and counted as a gap (the missing events, if they come,
will be stale).
"""

import logging
from enum import StrEnum

from django.db.models import F

from outbox.core.working_database import connection
from outbox.models import StreamCursor

logger = logging.getLogger(__name__)


class Position(StrEnum):
    NEXT = "next"
    GAP = "gap"
    STALE = "stale"


def advance(*, subscriber: str, stream: str, sequence: int) -> Position:
    """Move the subscriber's cursor on `stream` to `sequence`, or say why not. Runs in the caller's transaction."""
    last_sequence = _moved_cursor(subscriber, stream, sequence)
    if last_sequence is None:  # not moved: the first events of a new stream met (PostgreSQL)
        cursor_id, last_sequence = _locked_cursor(subscriber, stream)
        _move(cursor_id, last_sequence, sequence)
    if sequence <= last_sequence:
        logger.info("%s dropped stale %s#%d (already at #%d)", subscriber, stream, sequence, last_sequence)
        return Position.STALE
    if sequence - last_sequence - 1:
        # Counted (the admin's overview shows it) and logged at INFO: workers handling a stream's
        # events at once reorder them as a matter of course; a lost one is the sweep's to resend.
        logger.info("%s saw a gap in %s: #%d after #%d", subscriber, stream, sequence, last_sequence)
        return Position.GAP
    return Position.NEXT


def _moved_cursor(subscriber: str, stream: str, sequence: int) -> int | None:
    """Move the cursor (made if new, locked until the transaction ends) and return where it was, or None if not moved.
    On PostgreSQL one upsert reads it under its lock and moves it; elsewhere (SQLite, whose writers are
    serialised) it is read, then moved."""
    if connection.vendor != "postgresql":
        cursor_id, last_sequence = _locked_cursor(subscriber, stream)
        _move(cursor_id, last_sequence, sequence)
        return last_sequence
    table = connection.ops.quote_name(StreamCursor._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(_ADVANCE.format(table=table), [subscriber, stream, subscriber, stream, sequence, sequence - 1])
        moved = cursor.fetchone()
    # None: another transaction made the cursor after this statement's snapshot, so where it stood is unknown
    # here; the caller reads it locked and moves it then.
    return None if moved is None else moved[0]


# `before` locks the cursor (as strongly as an UPDATE does, no more) and reads where it stood (a
# concurrent mover is waited for, then its commit read); the upsert moves it from there, or makes
# it at `sequence` with the steps before it counted as gaps. The WHERE leaves a cursor made
# meanwhile by another transaction untouched (but locked), and then nothing is returned.
_ADVANCE = (
    "WITH before AS (SELECT last_sequence FROM {table} WHERE subscriber = %s AND stream = %s FOR NO KEY UPDATE) "
    "INSERT INTO {table} AS moved (subscriber, stream, last_sequence, gaps, stale) VALUES (%s, %s, %s, %s, 0) "
    "ON CONFLICT (subscriber, stream) DO UPDATE SET "
    "last_sequence = GREATEST(moved.last_sequence, EXCLUDED.last_sequence), "
    "gaps = moved.gaps + GREATEST(EXCLUDED.last_sequence - moved.last_sequence - 1, 0), "
    "stale = moved.stale + CASE WHEN EXCLUDED.last_sequence <= moved.last_sequence THEN 1 ELSE 0 END "
    "WHERE EXISTS (SELECT 1 FROM before) "
    "RETURNING COALESCE((SELECT last_sequence FROM before), 0)"
)


def hold(*, subscriber: str, streams: list[str]) -> None:
    """Lock the subscriber's cursors on `streams` until the transaction ends, in one statement, so that a pack
    holds its ordered envelopes' streams before handling the first. Each new cursor is made at 0, which `advance`
    then moves as it would have made it; taken in the sorted order given, two packs never deadlock."""
    # A stream no cursor can be made for (too long, a NUL) is left out: its envelope's own move fails in its
    # handler's turn and takes the path a failure takes, alone.
    fits = [s for s in streams if len(s) <= _STREAM_LENGTH and "\x00" not in s]
    if not fits:
        return
    table = connection.ops.quote_name(StreamCursor._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (subscriber, stream, last_sequence, gaps, stale) "
            f"VALUES {', '.join(['(%s, %s, 0, 0, 0)'] * len(fits))} "
            f"ON CONFLICT (subscriber, stream) DO UPDATE SET stale = {table}.stale",
            [value for stream in fits for value in (subscriber, stream)],
        )


_STREAM_LENGTH: int = StreamCursor._meta.get_field("stream").max_length or 0


def _move(cursor_id: int, last_sequence: int, sequence: int) -> None:
    """Move a cursor read (locked) at `last_sequence` to `sequence`, or count `sequence` as stale."""
    if sequence <= last_sequence:
        StreamCursor.objects.filter(pk=cursor_id).update(stale=F("stale") + 1)
    else:
        StreamCursor.objects.filter(pk=cursor_id).update(
            last_sequence=sequence, gaps=F("gaps") + sequence - last_sequence - 1
        )


def _locked_cursor(subscriber: str, stream: str) -> tuple[int, int]:
    """(id, last_sequence) of the subscriber's cursor on `stream`, made at 0 if new, locked until the transaction ends.
    One statement, no savepoint: a concurrent first message of the same stream waits on the unique index, then
    takes the row the other one committed."""
    table = connection.ops.quote_name(StreamCursor._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (subscriber, stream, last_sequence, gaps, stale) VALUES (%s, %s, 0, 0, 0) "
            f"ON CONFLICT (subscriber, stream) DO UPDATE SET stale = {table}.stale RETURNING id, last_sequence",
            [subscriber, stream],
        )
        return cursor.fetchone()
