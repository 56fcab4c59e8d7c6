"""A failed statement written by hand marks its transaction for rollback, as the ORM's `save()`
does: a caller that catches the error cannot commit as if nothing happened."""

import threading

import pytest
from django.db import DatabaseError, DataError, IntegrityError, OperationalError, connection, connections, transaction
from outbox_tests.probe.events import ProbePinged
from outbox_tests.probe.models import Ping

from outbox.core.locking import locked_row
from outbox.core.publishing import publish
from outbox.core.saving import insert_row, save_fields
from outbox.handling.dispatch import rolled_back

pytestmark = pytest.mark.django_db(transaction=True)


def test_insert_row_of_a_key_already_there_marks_the_transaction_as_save_does():
    record = Ping.objects.create(n=1)
    with transaction.atomic():
        with pytest.raises(IntegrityError):
            insert_row(Ping(pk=record.pk, n=2))
        assert connection.needs_rollback


def test_save_fields_of_a_row_that_is_gone_marks_the_transaction_as_save_does():
    record = Ping.objects.create(n=1)
    Ping.objects.filter(pk=record.pk).delete()
    with transaction.atomic():
        record.n = 2
        with pytest.raises(DatabaseError, match="did not affect any rows"):
            save_fields(record, ["n"])
        assert connection.needs_rollback


@pytest.mark.postgres
def test_locked_row_that_cannot_have_its_lock_marks_the_transaction():
    record = Ping.objects.create(n=1)
    held, release = threading.Event(), threading.Event()

    def hold_the_row():
        try:
            with transaction.atomic():
                locked_row(Ping, record.pk)
                held.set()
                release.wait(30)
        finally:
            connections["default"].close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert held.wait(30)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '50ms'")
            with pytest.raises(OperationalError):
                locked_row(Ping, record.pk)
            assert connection.needs_rollback
    finally:
        release.set()
        holder.join(30)


@pytest.mark.postgres
def test_a_transaction_postgresql_aborted_is_seen_as_rolled_back_whoever_sent_the_statement():
    """A service's own `cursor.execute` leaves Django's flag alone; PostgreSQL's own state tells."""
    with transaction.atomic():
        assert not rolled_back(connection)
        with pytest.raises(DatabaseError), connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")
        assert not connection.needs_rollback  # Django was not told
        assert rolled_back(connection)
        connection.set_rollback(True)


@pytest.mark.postgres
def test_a_publish_the_database_refuses_marks_the_transaction():
    """publish() sends its INSERT through psycopg's own cursor (PostgreSQL), not the ORM's save()."""
    with transaction.atomic():
        with pytest.raises(DataError):
            publish(ProbePinged(n=1, fail={"probe_a": "a NUL \x00 in jsonb"}), stream="refused")
        assert connection.needs_rollback
