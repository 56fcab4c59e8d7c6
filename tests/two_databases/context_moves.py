"""`move_context` on the rows the project makes, in the test's process: run by
tests/test_two_databases.py with `drones` on a database of their own. The drones move back onto
`default`, the deliveries onto the drones' database, each given its tables there for the test (as
`migrate --database` would make them), which the test's transaction takes away again.

A move deletes from the old database only what it found on the new one: waiting and refused
deliveries' assignments have no drone (NULL), a delivery's locations are JSON, an unreadable
message's dead letter has no message id; none may stop it, be left behind, or be copied twice."""

from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import DatabaseError, connections

from drones.models import Assignment, Drone
from drones.services import seed_fleet
from outbox.handling.dispatch import dispatch
from outbox.models import DeadLetter, InboxMessage, OutboxMessage, Stream, StreamCursor
from outbox.placement import database_of_subscriber as of_subscriber
from outbox.placement.moves import CannotMove, move_context
from outbox.testing import hand_over, run_choreography
from tests.factories import BASE, delivery_request, requested

pytestmark = pytest.mark.django_db(databases="__all__")


@pytest.fixture(autouse=True)
def _drones_on_a_database_of_their_own(settings):
    assert settings.OUTBOX_CONTEXT_DATABASES.get("drones") == "drones", "run with CONTEXT_DATABASE_URLS=drones=..."


def own_models(label: str) -> list:
    return [m for m in apps.get_app_config(label).get_models() if m._meta.managed and not m._meta.proxy]


def tables_of(label: str, database: str) -> None:
    """`label`'s tables on `database` as well, empty: where it moves to, or the ones it left behind."""
    with connections[database].schema_editor() as editor:
        for model in own_models(label):
            editor.create_model(model)


def rows_of(label: str, database: str) -> dict[str, list[dict]]:
    """`label`'s rows and its kernel rows on `database`, every field but the kernel's ids (each
    database numbers its own)."""
    found = {m._meta.db_table: list(m.objects.using(database).order_by("pk").values()) for m in own_models(label)}
    kernel = [
        (OutboxMessage.objects.filter(source=label), ("message_id", "target_subscriber")),
        (InboxMessage.objects.filter(subscriber=label), ("message_id",)),
        (StreamCursor.objects.filter(subscriber=label), ("stream",)),
        (DeadLetter.objects.filter(subscriber=label), ("first_failed_at",)),
    ]
    for rows, order in kernel:
        found[rows.model._meta.db_table] = [
            {field: value for field, value in row.items() if field != "id"}
            for row in rows.using(database).order_by(*order).values()
        ]
    return found


def none_of(rows: dict[str, list]) -> dict[str, list]:
    return {table: [] for table in rows}


def an_unreadable_message_to(subscriber: str) -> None:
    """Dead-lettered as dispatch does it: with no message id."""
    dispatch(subscriber=subscriber, body="not an envelope")
    letters = DeadLetter.objects.using(of_subscriber(subscriber))  # beside its inbox
    assert letters.filter(subscriber=subscriber, message_id__isnull=True).exists()


@pytest.fixture
def drones_at_work(customer, db):
    """On the drones' database: one drone reserved for a delivery, a delivery waiting for it, one
    cancelled while waiting and one refused (too heavy): the last three with no drone. And a
    message the drones could not read, dead-lettered with no message id."""
    seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    reserved, waiting, cancelled = requested(customer), requested(customer), requested(customer)
    for delivery_id in (reserved, waiting, cancelled):
        hand_over("delivery.requested", correlation_id=delivery_id, to="drones")
    assert customer.cancel(cancelled).status_code == 202
    hand_over("delivery.cancelled", correlation_id=cancelled, to="drones")
    piano = customer.request(delivery_request(packageInfo={"size": "Large", "weight": 500, "tag": "piano"}))
    hand_over("delivery.requested", correlation_id=piano.json()["deliveryId"], to="drones")
    an_unreadable_message_to("drones")
    with_no_drone = Assignment.objects.using("drones").filter(drone__isnull=True).order_by("status")
    assert list(with_no_drone.values_list("status", flat=True)) == ["refused", "released", "waiting"]
    return rows_of("drones", "drones")


def test_drones_with_deliveries_waiting_cancelled_and_refused_move_whole(drones_at_work):
    tables_of("drones", "default")
    said = StringIO()

    call_command("move_context", "drones", "--from", "drones", "--to", "default", stdout=said)

    assert "checked: every row is on default" in said.getvalue(), said.getvalue()
    assert rows_of("drones", "default") == drones_at_work
    assert rows_of("drones", "drones") == none_of(drones_at_work)


def test_deliveries_with_their_json_fields_move_whole(customer, db):
    """Their locations, a confirmation, an answer kept for a repeated request: JSON, which a set
    of rows cannot hold. And their cursors on the drones' streams, their inbox and their letters."""
    seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    delivered, waiting = requested(customer), requested(customer)
    run_choreography(correlation_id=delivered)
    hand_over("delivery.requested", correlation_id=waiting)
    an_unreadable_message_to("deliveries")
    before = rows_of("deliveries", "default")
    assert before["deliveries_delivery"][0]["pickup_location"] and before["outbox_streamcursor"], before
    tables_of("deliveries", "drones")

    move_context(label="deliveries", target="drones")

    assert rows_of("deliveries", "drones") == before
    assert rows_of("deliveries", "default") == none_of(before)


def test_a_move_run_again_after_its_delete_was_undone_copies_nothing_twice(drones_at_work):
    """The copy committed on the new database, the old database's delete rolled back: a second
    run finds every row there (the letter with no message id too, which no unique key stops)."""
    tables_of("drones", "default")
    with connections["drones"].cursor() as cursor:  # the old database fails the delete, as a lost connection would
        cursor.execute(
            "CREATE FUNCTION refuse_the_delete() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'the old database went away'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER the_old_database_fails BEFORE DELETE ON drones_drone "
            "FOR EACH STATEMENT EXECUTE FUNCTION refuse_the_delete()"
        )
    with pytest.raises(DatabaseError, match="the old database went away"):
        move_context(label="drones", source="drones", target="default")
    assert rows_of("drones", "default") == drones_at_work == rows_of("drones", "drones")
    with connections["drones"].cursor() as cursor:
        cursor.execute("DROP TRIGGER the_old_database_fails ON drones_drone")

    moved = {m.table: m for m in move_context(label="drones", source="drones", target="default")}

    assert rows_of("drones", "default") == drones_at_work
    assert rows_of("drones", "drones") == none_of(drones_at_work)
    assert moved["outbox_deadletter"].copied == 0 and moved["outbox_deadletter"].deleted == 1


def test_a_row_of_the_same_key_with_other_values_on_the_new_database_stops_the_move():
    """A drone written on the new database under a moved drone's id is not that drone: the move
    stops before deleting anything, its copy undone."""
    seed_fleet(count=2, latitude=BASE[0], longitude=BASE[1])
    before = rows_of("drones", "drones")
    tables_of("drones", "default")
    first = Drone.objects.using("drones").order_by("pk").first()
    Drone.objects.using("default").create(
        **{f.attname: getattr(first, f.attname) for f in Drone._meta.concrete_fields}
        | {"name": "another drone", "status": Drone.Status.MAINTENANCE}
    )
    there = rows_of("drones", "default")

    with pytest.raises(CannotMove, match="1 rows of drones_drone are not on the new database") as refused:
        move_context(label="drones", source="drones", target="default")

    assert str(first.pk) in str(refused.value)
    assert rows_of("drones", "drones") == before
    assert rows_of("drones", "default") == there


def test_a_stream_on_both_databases_goes_on_from_the_higher_number():
    """Numbered further on the new database, it keeps its number there; further on the old, it
    takes that one: either way its next event is after the last any subscriber saw."""
    Stream.objects.using("drones").bulk_create(
        [Stream(name="drone:further-here", last_sequence=7), Stream(name="drone:further-there", last_sequence=3)]
        + [Stream(name="drone:only-here", last_sequence=4)]
    )
    Stream.objects.using("default").bulk_create(
        [Stream(name="drone:further-here", last_sequence=2), Stream(name="drone:further-there", last_sequence=9)]
    )
    tables_of("drones", "default")

    move_context(label="drones", source="drones", target="default")

    carried = Stream.objects.using("default").filter(name__startswith="drone:")
    assert dict(carried.values_list("name", "last_sequence")) == {
        "drone:further-here": 7,
        "drone:further-there": 9,
        "drone:only-here": 4,
    }
