"""`locked_row()`: a row by its key, locked, read as the ORM reads it, its statement written once."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import OperationalError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import isolate_apps
from outbox_tests.probe.events import ProbeEchoed
from outbox_tests.probe.models import Ping

from outbox.core.locking import locked_row
from outbox.core.publishing import publish
from outbox.models import OutboxMessage


@pytest.mark.django_db
def test_the_row_reads_as_the_orms_every_field_converted_and_none_when_there_is_none():
    with transaction.atomic():
        published = publish(ProbeEchoed(n=7), stream="lock:1")
    with transaction.atomic():
        row = locked_row(OutboxMessage, published.id)
        missing = locked_row(OutboxMessage, published.id + 1000)

    expected = OutboxMessage.objects.get(pk=published.id)
    assert type(row) is OutboxMessage and missing is None
    for field in OutboxMessage._meta.concrete_fields:  # JSON decoded, times aware, UUIDs as UUIDs
        assert getattr(row, field.attname) == getattr(expected, field.attname), field.attname


@pytest.mark.django_db(transaction=True)  # no test-wide transaction around it
def test_outside_a_transaction_it_is_refused_as_select_for_update_is():
    with pytest.raises(TransactionManagementError, match="inside transaction.atomic"):
        locked_row(OutboxMessage, 1)


@contextmanager
def held_by_another_transaction(row_id: int) -> Iterator[None]:
    """`locked_row` of the outbox row `row_id` in a transaction of another thread, open until the block ends."""
    held, release, errors = threading.Event(), threading.Event(), []

    def holder() -> None:
        try:
            with transaction.atomic():
                assert locked_row(OutboxMessage, row_id) is not None
                held.set()
                release.wait(20)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(20)
        yield
    finally:
        release.set()
        thread.join(30)
    assert errors == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_lock_holds_until_the_transaction_ends():
    """Another transaction asking for the row without waiting is refused while the holder's is open."""
    with transaction.atomic():
        published = publish(ProbeEchoed(n=8), stream="lock:2")

    with (
        held_by_another_transaction(published.id),
        pytest.raises(OperationalError, match="could not obtain lock"),
        transaction.atomic(),
    ):
        OutboxMessage.objects.select_for_update(nowait=True).get(pk=published.id)

    with transaction.atomic():  # released with the holder's transaction
        assert OutboxMessage.objects.select_for_update(nowait=True).get(pk=published.id).id == published.id


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_second_locked_row_of_the_same_row_waits_for_the_first():
    """Two services about one row are serialised by it: a lock two readers could share (FOR SHARE)
    would let both read the same state and both write. The second `locked_row` must wait, here
    until its lock_timeout gives up (the holder never commits meanwhile): it never gets the row."""
    with transaction.atomic():
        published = publish(ProbeEchoed(n=9), stream="lock:3")

    with (
        held_by_another_transaction(published.id),
        pytest.raises(OperationalError, match="lock timeout"),
        transaction.atomic(),
    ):
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '100ms'")
        locked_row(OutboxMessage, published.id)

    with transaction.atomic():  # the holder's transaction over, the row is the next one's
        assert locked_row(OutboxMessage, published.id).id == published.id


@isolate_apps("outbox_tests.probe")  # the model below exists for this test only
def test_a_model_with_multi_table_inheritance_is_refused_rather_than_half_read():
    """Its parent's fields are in another table, which the one statement does not read or lock."""

    class Special(Ping):
        class Meta:
            app_label = "probe"

    with pytest.raises(TypeError, match="multi-table inheritance"):
        locked_row(Special, 1)
