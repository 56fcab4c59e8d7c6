"""The stream cursor of an ordered subscriber, under messages of one new stream arriving at once."""

import threading

import pytest
from django.db import connection, transaction

from outbox.models import StreamCursor
from outbox.ordering import Position, advance

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.mark.django_db(transaction=True)
def test_the_first_messages_of_a_new_stream_arriving_together_make_one_cursor_and_lose_no_step():
    """Eight workers take events 1 to 8 of a stream no cursor knows yet, at the same moment: one
    of them makes the cursor, the others wait for it on the unique index and read it."""
    count, barrier, seen, errors = 8, threading.Barrier(8), {}, []

    def take(sequence: int) -> None:
        try:
            barrier.wait(10)
            with transaction.atomic():
                seen[sequence] = advance(subscriber="probe_a", stream="race:1", sequence=sequence)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=take, args=(n,)) for n in range(1, count + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    cursor = StreamCursor.objects.get(subscriber="probe_a", stream="race:1")
    assert cursor.last_sequence == count
    stale = [n for n, position in seen.items() if position == Position.STALE]
    assert cursor.stale == len(stale) and len(seen) == count
    # Each one that went forward went past every step it skipped, once: the gaps add up.
    forward = sorted(n for n, position in seen.items() if position != Position.STALE)
    assert cursor.gaps == count - len(forward)
