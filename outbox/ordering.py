"""Order within a stream, for subscriptions declared `ordered=True`.

Transport gives no order across retries, replays and several workers, so an ordered subscriber
keeps a cursor per stream: an event older than one already applied is dropped as stale, and a
jump past the next number is logged and counted as a gap (the missing events, if they come,
will be stale).
"""

import logging
from enum import StrEnum

from django.db import IntegrityError, transaction
from django.db.models import F

from outbox.models import StreamCursor

logger = logging.getLogger(__name__)


class Position(StrEnum):
    NEXT = "next"
    GAP = "gap"
    STALE = "stale"


def advance(*, subscriber: str, stream: str, sequence: int) -> Position:
    """Move the subscriber's cursor on `stream` to `sequence`, or say why not. Runs in the caller's transaction."""
    cursor = _locked_cursor(subscriber, stream)
    if sequence <= cursor.last_sequence:
        StreamCursor.objects.filter(pk=cursor.pk).update(stale=F("stale") + 1)
        logger.info("%s dropped stale %s#%d (already at #%d)", subscriber, stream, sequence, cursor.last_sequence)
        return Position.STALE
    missing = sequence - cursor.last_sequence - 1
    StreamCursor.objects.filter(pk=cursor.pk).update(last_sequence=sequence, gaps=F("gaps") + missing)
    if missing:
        # Counted (the admin's overview shows it) and logged at INFO: workers handling a stream's
        # events at once reorder them as a matter of course; a lost one is the sweep's to resend.
        logger.info("%s saw a gap in %s: #%d after #%d", subscriber, stream, sequence, cursor.last_sequence)
        return Position.GAP
    return Position.NEXT


def _locked_cursor(subscriber: str, stream: str) -> StreamCursor:
    cursors = StreamCursor.objects.select_for_update()
    cursor = cursors.filter(subscriber=subscriber, stream=stream).first()
    if cursor is None:
        try:
            with transaction.atomic():
                StreamCursor.objects.create(subscriber=subscriber, stream=stream)
        except IntegrityError:  # created by a concurrent message of the same stream
            pass
        cursor = cursors.get(subscriber=subscriber, stream=stream)
    return cursor
