"""The stream cursor of an ordered subscriber, under messages of one new stream arriving at once."""

import threading

import pytest
from django.db import connection, transaction
from outbox_tests.sessions import backend_pid, blocked_by

from outbox.handling.ordering import Position, advance
from outbox.models import StreamCursor

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


def waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_a_handler_of_a_stream_waits_for_the_cursor_another_has_read_until_that_one_commits(monkeypatch):
    """The interleaving that lets two handlers of one stream both advance without the cursor's lock,
    forced every time: #3 has read the cursor (at #1) and is paused in its transaction; #2 comes."""
    from outbox_tests.waiting import wait_until

    from outbox.handling import ordering

    StreamCursor.objects.create(subscriber="probe_a", stream="race:2", last_sequence=1)
    read, go, second_done, seen, errors = threading.Event(), threading.Event(), threading.Event(), {}, []
    moved_cursor = ordering._moved_cursor

    def pausing_after_the_read(subscriber, stream, sequence):
        found = moved_cursor(subscriber, stream, sequence)
        if threading.current_thread().name == "first":
            read.set()
            go.wait(20)  # holding what it read, not yet committed
        return found

    monkeypatch.setattr(ordering, "_moved_cursor", pausing_after_the_read)

    def take(sequence: int, done=None) -> None:
        try:
            with transaction.atomic():
                seen[sequence] = advance(subscriber="probe_a", stream="race:2", sequence=sequence)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()
            if done:
                done.set()

    first = threading.Thread(target=take, args=(3,), name="first")
    second = threading.Thread(target=take, args=(2, second_done))
    first.start()
    try:
        assert read.wait(20)
        second.start()
        # The second either reads the cursor at once (no lock: it sees #1 too) or waits for the first.
        wait_until(lambda: second_done.is_set() or waiting_on_a_lock(), what="the second handler to read or wait")
        second_read_before_the_first_committed = second_done.is_set()
    finally:
        go.set()
        first.join(30)
        second.join(30)
    assert errors == []

    assert seen == {3: Position.GAP, 2: Position.STALE}  # one advanced; the other found it past #2
    assert not second_read_before_the_first_committed
    cursor = StreamCursor.objects.get(subscriber="probe_a", stream="race:2")
    assert (cursor.last_sequence, cursor.gaps, cursor.stale) == (3, 1, 1)


@pytest.mark.parametrize(
    ("sequence", "position", "after"),
    [(7, Position.GAP, (7, 4 + 1, 0)), (6, Position.NEXT, (6, 4, 0)), (3, Position.STALE, (5, 4, 1))],
    ids=["gap", "next", "stale"],
)
@pytest.mark.django_db(transaction=True)
def test_a_cursor_another_transaction_made_meanwhile_is_read_under_its_lock_and_moved(
    monkeypatch, sequence, position, after
):
    """The one-statement move finds no cursor in its snapshot, then waits on the unique index for
    a transaction that is making it (the stream's first event, #5, not yet committed): once that
    commits, the upsert leaves the row alone and returns nothing, and the cursor must be read
    under its lock and moved from where the other left it. Forced every time: the second waits
    (PostgreSQL says whom for) before the first commits."""
    from outbox_tests.waiting import wait_until

    from outbox.handling import ordering

    taken_again, locked_cursor = [], ordering._locked_cursor

    def noting_who_reads_it_again(subscriber, stream):
        taken_again.append(threading.current_thread().name)
        return locked_cursor(subscriber, stream)

    monkeypatch.setattr(ordering, "_locked_cursor", noting_who_reads_it_again)
    made, commit, pids, seen, errors = threading.Event(), threading.Event(), {}, {}, []

    def take(sequence: int) -> None:
        name = threading.current_thread().name
        try:
            with transaction.atomic():
                pids[name] = backend_pid()
                seen[name] = advance(subscriber="probe_a", stream="made:1", sequence=sequence)
                if name == "maker":
                    made.set()
                    commit.wait(20)  # the cursor made, not yet committed
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    maker = threading.Thread(target=take, args=(5,), name="maker")
    mover = threading.Thread(target=take, args=(sequence,), name="mover")
    maker.start()
    try:
        assert made.wait(20)
        mover.start()
        wait_until(
            lambda: "mover" in pids and blocked_by(pids["mover"], pids["maker"]),
            what="the second to wait for the transaction making the cursor",
        )
    finally:
        commit.set()
        maker.join(30)
        mover.join(30)
    assert errors == []

    assert seen == {"maker": Position.GAP, "mover": position}
    cursor = StreamCursor.objects.get(subscriber="probe_a", stream="made:1")
    assert (cursor.last_sequence, cursor.gaps, cursor.stale) == after
    assert taken_again == ["mover"]  # the way this test is about was the one taken


@pytest.mark.django_db(transaction=True)
def test_each_message_moves_the_cursor_in_one_statement_and_the_counts_are_exact():
    """A new cursor is made at its first event, the steps before it counted as gaps; an existing
    one is read under its lock and moved in the same statement (two before): next, gap and stale."""
    from django.test.utils import CaptureQueriesContext

    outcomes = []
    for sequence in (3, 4, 7, 5, 7, 8):
        with transaction.atomic(), CaptureQueriesContext(connection) as statements:
            outcomes.append(advance(subscriber="probe_a", stream="one:1", sequence=sequence))
        assert len(statements) == 1, [q["sql"] for q in statements.captured_queries]

    assert outcomes == [Position.GAP, Position.NEXT, Position.GAP, Position.STALE, Position.STALE, Position.NEXT]
    cursor = StreamCursor.objects.get(subscriber="probe_a", stream="one:1")
    assert (cursor.last_sequence, cursor.gaps, cursor.stale) == (8, 2 + 2, 2)
